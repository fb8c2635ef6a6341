"""The typed, immutable syntax tree of a workflow; every node carries its source span."""

from __future__ import annotations

from dataclasses import dataclass

from srpo_dsl.lang.errors import Span


@dataclass(frozen=True)
class Ident:
    """A name as written, with where it was written."""

    name: str
    span: Span


@dataclass(frozen=True)
class Symbol:
    """A bare word used as a value (`objective = srpo`)."""

    name: str


Value = str | int | float | bool | Symbol


@dataclass(frozen=True)
class Option:
    """`name = value` in a call or a `with (...)` list; positional call args have `name=None`."""

    name: str | None
    value: Value
    span: Span


@dataclass(frozen=True)
class Call:
    """`kind(arg, key = value, ...)`: the binding of a policy, task or tool."""

    kind: Ident
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
    """The output contract of an agent: `boxed`, `route(solver)`, `verdict(approve, reject)`."""

    name: Ident
    args: tuple[Ident, ...]
    span: Span


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


@dataclass(frozen=True)
class Reward:
    fn: Ident
    agent: Ident
    field: tuple[str, ...]  # e.g. ("task", "answer")
    field_span: Span
    penalty: float
    span: Span


@dataclass(frozen=True)
class Train:
    options: tuple[Option, ...]
    span: Span


@dataclass(frozen=True)
class Cond:
    """`agent == word` or `agent != word`."""

    agent: Ident
    op: str
    word: Ident
    span: Span


@dataclass(frozen=True)
class Route:
    agent: Ident
    span: Span


@dataclass(frozen=True)
class Parallel:
    """One active set: all replicas, explicit 1-based replicas, or the subset a router chose."""

    agent: Ident
    by: Ident | None
    replicas: tuple[int, ...] | None
    span: Span


@dataclass(frozen=True)
class Verify:
    agent: Ident
    span: Span


@dataclass(frozen=True)
class Revise:
    agent: Ident
    replica: int  # 1-based
    span: Span


@dataclass(frozen=True)
class Aggregate:
    agent: Ident
    span: Span


@dataclass(frozen=True)
class CallTool:
    tool: Ident
    agent: Ident
    span: Span


@dataclass(frozen=True)
class Repeat:
    bound: int | None
    body: tuple[Step, ...]
    until: Cond | None
    span: Span


@dataclass(frozen=True)
class If:
    cond: Cond
    then: tuple[Step, ...]
    orelse: tuple[Step, ...]
    span: Span


@dataclass(frozen=True)
class Break:
    """`break if agent == word`: leave the innermost loop."""

    cond: Cond
    span: Span


Step = Route | Parallel | Verify | Revise | Aggregate | CallTool | Repeat | If | Break
EVENT_STEPS = (Route, Parallel, Verify, Revise, Aggregate)


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


def walk_steps(steps: tuple[Step, ...]):
    """Every step, depth first, in program order."""
    for step in steps:
        yield step
        if isinstance(step, Repeat):
            yield from walk_steps(step.body)
        elif isinstance(step, If):
            yield from walk_steps(step.then)
            yield from walk_steps(step.orelse)
