"""The typed, immutable syntax tree of a workflow; every node carries its source span."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Generic, ParamSpec, TypeVar, cast

from srpo_dsl.lang.syntax.messages import Span

R = TypeVar("R")
P = ParamSpec("P")


@dataclass(frozen=True)
class Ident:
    """A name as written, with where it was written."""

    name: str
    span: Span


@dataclass(frozen=True)
class Ref:
    """A quoted reference to a Python callable: `"file.py:function"` or `"package.module:function"`."""

    text: str
    span: Span


@dataclass(frozen=True)
class Symbol:
    """A bare word used as a value (`objective = srpo`)."""

    name: str


Plain = str | int | float | bool | Symbol
Value = Plain | tuple[Plain, ...]  # a tuple: a list value `[a, b]`


@dataclass(frozen=True)
class Option:
    """`name = value` in a call or a `with (...)` list; positional call args have `name=None`."""

    name: str | None
    value: Value
    span: Span
    value_span: Span | None = field(default=None, compare=False)  # the value alone


@dataclass(frozen=True)
class Call:
    """`kind(arg, key = value, ...)`: the binding of a policy, task or tool (`kind` may be Python code)."""

    kind: Ident | Ref
    args: tuple[Option, ...]
    span: Span


@dataclass(frozen=True)
class Policy:
    name: Ident
    source: Call
    frozen: bool
    lora: tuple[Option, ...] | None
    options: tuple[Option, ...]
    span: Span


@dataclass(frozen=True)
class Task:
    source: Call
    span: Span


@dataclass(frozen=True)
class Tool:
    name: Ident
    source: Call
    span: Span


@dataclass(frozen=True)
class Contract:
    """The output contract of an agent: `boxed`, `route(solver)`, `verdict(approve, reject)`, or a
    Python parser `"parsers.py:parse"` (a `Ref`, without arguments)."""

    name: Ident | Ref
    args: tuple[Ident, ...]
    span: Span


@dataclass(frozen=True)
class Env:
    """`env NAME = "file.py:function"(...) [emits verdict(W, ...), route(POOL), ...]`: the user's
    environment, stepped by `step NAME [on ...]`; `emits` lists the words its steps return (which
    conditions test) and the pools whose replicas it selects (`parallel POOL by NAME`)."""

    name: Ident
    source: Call
    span: Span
    emits: tuple[Contract, ...] = ()


@dataclass(frozen=True)
class Agent:
    name: Ident
    replicas: int  # pool size; 1 for a single agent
    pooled: bool  # written with `[N]`
    policy: Ident
    prompt: str
    prompt_span: Span
    contract: Contract
    options: tuple[Option, ...]
    span: Span
    system: str | None = None  # `system "TEMPLATE"`: the system message's template
    system_span: Span | None = None


@dataclass(frozen=True)
class Reward:
    """`reward FN(AGENT, task.FIELD)`, `reward "f.py:fn"(AGENT)`, or `reward ENV` (`fn` the env, no agent)."""

    fn: Ident | Ref
    agent: Ident | None
    field: tuple[str, ...] | None  # e.g. ("task", "answer"); None when not written
    field_span: Span | None
    penalty: float
    span: Span


@dataclass(frozen=True)
class Train:
    options: tuple[Option, ...]
    span: Span


@dataclass(frozen=True)
class Cond:
    """`agent == word` or `agent != word`; with `field` (`agent.finish == word`) an attribute of the agent's
    last event instead of its decision."""

    agent: Ident
    op: str
    word: Ident
    span: Span
    field: Ident | None = None


@dataclass(frozen=True)
class Scorer:
    """`by exact_match(task.answer)` (a reward function and the task field it compares with) or
    `by "file.py:function"` (the user's Python, called as a reward: `(answer, row)`)."""

    fn: Ident | Ref
    field: tuple[str, ...] | None  # ("task", "answer") for a reward function; None for Python
    span: Span


@dataclass(frozen=True)
class Branch:
    """`branch N [cross] [keep RULE] [by SCORER]`: N alternatives of the step's event from one pre-action
    state (`cross`: N of each agent's part, every joint combination an alternative)."""

    count: int
    keep: Ident | None  # None: every alternative continues (a tree)
    scorer: Scorer | None
    span: Span
    count_span: Span
    cross: Span | None = None  # the `cross` word, when written


class _StepNode:
    """What every step has: its nested blocks (a loop's body, a branch's arms) for `walk_steps`."""

    @property
    def blocks(self) -> tuple[tuple[Step, ...], ...]:
        return ()


@dataclass(frozen=True)
class EventStep(_StepNode):
    """A step in which one agent acts (one replica, or a set of its pool): one decision event.

    `kind` is its keyword, a key of the step table (`srpo_dsl.lang.syntax.steps`), which says what the
    step means to each stage."""

    kind: str
    agent: Ident
    by: Ident | None  # `KIND P by R`: the router whose choice selects the members
    replicas: tuple[int, ...] | None  # `KIND P[i, j]`: 1-based replicas, as written
    span: Span
    only: tuple[Ident, ...] | None = None  # `... only answer`: the actions an acting agent may take here
    others: tuple[Ident, ...] = ()  # `parallel a, b`: the agents answering with `agent` (a mixed set)
    branch: Branch | None = None  # `... branch N [keep RULE] [by SCORER]`: alternatives of the event

    @property
    def agents(self) -> tuple[Ident, ...]:
        """Every agent whose members form the step's event, in the written order."""
        return (self.agent, *self.others)


@dataclass(frozen=True)
class CallTool(_StepNode):
    tool: Ident
    agent: Ident
    span: Span


@dataclass(frozen=True)
class EnvStep(_StepNode):
    """`step ENV on A, B`: the environment reads the last outputs of the agents `on` (`step ENV`: none)."""

    env: Ident
    on: tuple[Ident, ...]
    span: Span


@dataclass(frozen=True)
class Repeat(_StepNode):
    bound: int | None
    body: tuple[Step, ...]
    until: Cond | None
    span: Span

    @property
    def blocks(self) -> tuple[tuple[Step, ...], ...]:
        return (self.body,)


@dataclass(frozen=True)
class If(_StepNode):
    cond: Cond
    then: tuple[Step, ...]
    orelse: tuple[Step, ...]
    span: Span

    @property
    def blocks(self) -> tuple[tuple[Step, ...], ...]:
        return (self.then, self.orelse)


@dataclass(frozen=True)
class Break(_StepNode):
    """`break if agent == word`: leave the innermost loop."""

    cond: Cond
    span: Span


Step = EventStep | CallTool | EnvStep | Repeat | If | Break

# Which method of a `StepVisitor` each kind of step goes to.
_VISIT_METHODS: dict[type, str] = {
    EventStep: "visit_event",
    CallTool: "visit_call",
    EnvStep: "visit_env",
    Repeat: "visit_repeat",
    If: "visit_if",
    Break: "visit_break",
}


class StepVisitor(ABC, Generic[P, R]):
    """What each kind of step means to one pass over the steps (checks, compilation, bounds).

    `visit(step, *args)` calls the method for the step's kind with `args` (of the types `P` names,
    each method returning an `R`): one table lookup, no
    chain of isinstance tests. Event steps share `visit_event`: control flows through them alike,
    and what their kind means is looked up in the step table (`srpo_dsl.lang.syntax.steps`). A subclass
    defines every method (else it cannot be instantiated): a pass cannot forget a kind of step.
    """

    _methods: ClassVar[dict[type, Callable[..., object]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._methods = {kind: getattr(cls, name) for kind, name in _VISIT_METHODS.items()}

    def visit(self, step: Step, *args: P.args, **kwargs: P.kwargs) -> R:
        # the table holds this class's own `visit_*` methods, each returning an R
        return cast(R, self._methods[type(step)](self, step, *args, **kwargs))

    @abstractmethod
    def visit_event(self, step: EventStep, *args: P.args, **kwargs: P.kwargs) -> R: ...

    @abstractmethod
    def visit_call(self, step: CallTool, *args: P.args, **kwargs: P.kwargs) -> R: ...

    @abstractmethod
    def visit_env(self, step: EnvStep, *args: P.args, **kwargs: P.kwargs) -> R: ...

    @abstractmethod
    def visit_repeat(self, step: Repeat, *args: P.args, **kwargs: P.kwargs) -> R: ...

    @abstractmethod
    def visit_if(self, step: If, *args: P.args, **kwargs: P.kwargs) -> R: ...

    @abstractmethod
    def visit_break(self, step: Break, *args: P.args, **kwargs: P.kwargs) -> R: ...


@dataclass(frozen=True)
class Program:
    """A whole workflow file; declarations keep their order of appearance."""

    name: Ident
    policies: tuple[Policy, ...]
    tasks: tuple[Task, ...]
    tools: tuple[Tool, ...]
    agents: tuple[Agent, ...]
    rewards: tuple[Reward, ...]
    trains: tuple[Train, ...]
    steps: tuple[Step, ...]
    file: str
    source: str
    envs: tuple[Env, ...] = ()


def walk_steps(steps: tuple[Step, ...]) -> Iterator[Step]:
    """Every step, depth first, in program order (a loop's body, then-arm and else-arm included)."""
    for step in steps:
        yield step
        for block in step.blocks:
            yield from walk_steps(block)


def walk_events(steps: tuple[Step, ...]) -> Iterator[EventStep]:
    """The event steps among `walk_steps(steps)`."""
    return (s for s in walk_steps(steps) if isinstance(s, EventStep))
