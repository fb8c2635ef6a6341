"""The compiled program as frozen types: the contract between the compiler and every later stage.

The compiler builds an `EventGraph`; the executor, the trainer, audit and metrics read its typed
fields. `EventGraph.to_networkx()` is the boundary to the documented `networkx.DiGraph` (its
node-link JSON, the exports): the same attributes, in the same order, as docs/dsl.md lists.

Control flow: an edge is taken along one of its `ways`, a conjunction of `Atom`s that must all
hold, with the loop effects of taking it (`reset`: the loop is entered, iteration 1; then
`increment`: its next iteration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal, NamedTuple

from srpo_dsl.lang.checks.declarations import (
    AgentInfo,
    Binding,
    BranchInfo,
    EnvInfo,
    PolicyInfo,
    RewardInfo,
    ToolInfo,
    sampling_attrs,
)
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.syntax.steps import StepKind
from srpo_dsl.lang.usercode.pycode import CodeRef

if TYPE_CHECKING:
    import networkx as nx

GRAPH_SCHEMA = "srpo-graph/1"
BASE_ADAPTER = "__base__"  # peft's name, in per-row `adapter_names`, for rows of the base alone


def adapter_name(policy: str) -> str:
    """The peft adapter of an adapter policy (peft warns about names inside its `lora_` prefix)."""
    return f"adapter_{policy}"


def attribute_key(agent: str, field: str) -> str:
    """The name an atom tests an agent's attribute by (`solver.finish`), beside its decision (`solver`)."""
    return f"{agent}.{field}"


Op = Literal["==", "!=", "<", ">="]


class Atom(NamedTuple):
    """`name op value`: an agent's last verdict or route (`kind` "var"), or a loop's iteration ("loop")."""

    kind: Literal["var", "loop"]
    name: str
    op: Op
    value: str | int

    def negated(self) -> Atom:
        return self._replace(op=_FLIP[self.op])

    def holds(self, state: Mapping[str, object], loops: Mapping[str, int]) -> bool:
        """Against an episode's recorded verdicts/routes and its 1-based loop iterations."""
        if self.kind == "loop":
            iteration, bound = loops.get(self.name, 1), self.value
            assert isinstance(bound, int), "a loop's atom compares its iteration with its bound"
            return iteration < bound if self.op == "<" else iteration >= bound
        same = state.get(self.name) == self.value
        return same if self.op == "==" else not same

    def to_dict(self) -> dict[str, object]:
        return {self.kind: self.name, "op": self.op, "value": self.value}


_FLIP: dict[Op, Op] = {"==": "!=", "!=": "==", "<": ">=", ">=": "<"}


class Way(NamedTuple):
    """One way along an edge: when every atom of `conj` holds; taking it applies `reset`, then `increment`."""

    conj: tuple[Atom, ...]
    reset: tuple[str, ...] = ()
    increment: tuple[str, ...] = ()

    def holds(self, state: Mapping[str, object], loops: Mapping[str, int]) -> bool:
        return all(a.holds(state, loops) for a in self.conj)


_PLAIN = (Way(()),)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    ways: tuple[Way, ...]
    when: str  # the guard as text: `always`, `verifier != approve and loop < 4`, ...

    def attrs(self) -> dict[str, object]:
        if self.ways == _PLAIN:  # most edges: one way, no atom, no loop effect
            return {"guard": [[]], "effects": [{"reset": [], "increment": []}], "when": "always"}
        return {
            "guard": [[a.to_dict() for a in w.conj] for w in self.ways],
            "effects": [{"reset": list(w.reset), "increment": list(w.increment)} for w in self.ways],
            "when": self.when,
        }


@dataclass(frozen=True)
class Where:
    """A node's source position and its innermost enclosing loop (None outside loops)."""

    span: str
    line: int
    col: int
    loop: str | None


@dataclass(frozen=True)
class Terminal:
    id: str
    kind: Literal["start", "end"]

    @property
    def label(self) -> str:
        return self.kind

    def attrs(self) -> dict[str, object]:
        return {"kind": self.kind, "label": self.label}


@dataclass(frozen=True)
class EventNode:
    """A step that produces one decision event: its members are `replicas` of `agent`'s pool."""

    id: str
    step: StepKind  # its kind's entry in the step table: effects, shape, ...
    where: Where
    label: str
    agent: AgentInfo
    event_type: str  # stable id used for advantage grouping
    replicas: tuple[int, ...]  # member slots (a routed step: the whole pool, the router picks)
    cardinality: tuple[int, int]  # (min K, max K)
    routed_by: str | None
    actions: tuple[str, ...] = ()  # the actions an acting agent may take here (`only`, else all); ()
    others: tuple[AgentInfo, ...] = ()  # a mixed set (`parallel a, b`): the agents answering with `agent`
    branch: BranchInfo | None = None  # `... branch N`: the event is sampled N times from one state

    @property
    def agents(self) -> tuple[AgentInfo, ...]:
        return (self.agent, *self.others)

    @property
    def slots(self) -> tuple[tuple[AgentInfo, int], ...]:
        """(agent, replica) of every member slot: `agent`'s replicas, then every replica of each other."""
        rest = tuple((o, r) for o in self.others for r in range(1, o.replicas + 1))
        return tuple((self.agent, r) for r in self.replicas) + rest

    @property
    def kind(self) -> str:
        """The step's keyword (`verify`, `parallel`, ...)."""
        return self.step.keyword

    @property
    def policy(self) -> str:
        return self.agent.policy

    def attrs(self) -> dict[str, object]:
        a, slots = self.agent, self.slots
        return {
            **_where(self.kind, self.where),
            "label": self.label,
            "agent": a.name,
            "agents": [x.name for x in self.agents],
            "event_type": self.event_type,
            "roles": [x.name for x, _ in slots],
            "replicas": [r for _, r in slots],
            "policy": [x.policy for x, _ in slots],
            "cardinality": {"min": self.cardinality[0], "max": self.cardinality[1]},
            "routed_by": self.routed_by,
            "contract": a.contract,
            "contract_args": list(a.contract_args),
            "actions": list(self.actions),
            "template": a.prompt,
            "max_tokens": a.max_tokens,
            "temperature": a.temperature,
            "top_p": a.top_p,
            "sampling": sampling_attrs(a),
            "pool_size": a.replicas,
            "branch": self.branch.attrs() if self.branch else None,
        }


@dataclass(frozen=True)
class ToolNode:
    """A tool called on the valid outputs of `on`'s last event; its results are observations."""

    id: str
    where: Where
    tool: str
    tool_kind: str
    on: str
    top_k: int | None  # documents per query of a retriever; None for a Python tool
    max_calls: int
    kind: Literal["tool"] = "tool"

    @property
    def label(self) -> str:
        return f"call {self.tool} on {self.on}"

    def attrs(self) -> dict[str, object]:
        return {
            **_where(self.kind, self.where),
            "label": self.label,
            "tool": self.tool,
            "tool_kind": self.tool_kind,
            "on": self.on,
            "top_k": self.top_k,
            "max_calls": self.max_calls,
        }


@dataclass(frozen=True)
class EnvNode:
    """An environment step: the user's environment reads the last outputs of the agents `on` (none for
    `step ENV`) and answers with observations (no generation: not an event)."""

    id: str
    where: Where
    env: str
    on: tuple[str, ...]
    kind: Literal["env"] = "env"

    @property
    def label(self) -> str:
        return f"step {self.env} on {', '.join(self.on)}" if self.on else f"step {self.env}"

    def attrs(self) -> dict[str, object]:
        return {**_where(self.kind, self.where), "label": self.label, "env": self.env, "on": list(self.on)}


def _where(kind: str, where: Where) -> dict[str, object]:
    return {"kind": kind, "span": where.span, "line": where.line, "col": where.col, "loop": where.loop}


Node = Terminal | EventNode | ToolNode | EnvNode


@dataclass(frozen=True)
class Bounds:
    """Static cost bounds per episode."""

    events: int
    calls: int  # sum of K
    tool_calls: int
    tokens: int
    paths: int = 1  # the rollouts one episode splits into: the product of its tree branches' counts


@dataclass(frozen=True)
class EventGraph:
    """A compiled workflow: nodes and guarded edges, its declarations and its static bounds."""

    name: str
    source: str
    hash: str
    bounds: Bounds
    nodes: Mapping[str, Node]  # in compile order: start, the steps, end
    edges: tuple[Edge, ...]
    loops: Mapping[str, int]  # loop id -> its bound
    policies: Mapping[str, PolicyInfo]
    agents: Mapping[str, AgentInfo]
    task: Binding | None
    tools: Mapping[str, ToolInfo]  # the tools, each with the JSON schema a chat template is given
    reward: RewardInfo | None
    train: TrainOptions
    code: tuple[CodeRef, ...] = ()  # the user's Python it names (read, never run, by the compiler)
    envs: Mapping[str, EnvInfo] = field(default_factory=dict)  # the environments: `env NAME = ...`
    out_edges: Mapping[str, tuple[Edge, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        out: dict[str, list[Edge]] = {v: [] for v in self.nodes}
        for e in self.edges:
            out[e.source].append(e)
        object.__setattr__(self, "out_edges", {v: tuple(es) for v, es in out.items()})

    @cached_property
    def adapters(self) -> Mapping[str, str]:
        """The peft adapter every policy on a shared base generates and trains through: an adapter
        policy's own (`adapter_NAME`), `BASE_ADAPTER` for a base that hosts adapters."""
        out = {name: adapter_name(name) for name, p in self.policies.items() if p.base is not None}
        return out | {p.base: BASE_ADAPTER for p in self.policies.values() if p.base is not None}

    def adapters_on(self, base: str) -> dict[str, dict[str, object]]:
        """{peft adapter name: LoRA options} of the adapter policies on `base`, in declaration order."""
        return {self.adapters[n]: dict(p.lora or {}) for n, p in self.policies.items() if p.base == base}

    @cached_property
    def event_nodes(self) -> tuple[EventNode, ...]:
        return tuple(v for v in self.nodes.values() if isinstance(v, EventNode))

    def to_networkx(self) -> nx.DiGraph[str]:
        """The documented `networkx.DiGraph` (docs/dsl.md, "The compiled event graph")."""
        import networkx as nx

        g: nx.DiGraph[str] = nx.DiGraph()
        g.add_nodes_from((v, node.attrs()) for v, node in self.nodes.items())
        g.add_edges_from((e.source, e.target, e.attrs()) for e in self.edges)
        g.graph.update(self.graph_attrs())
        return g

    def graph_attrs(self) -> dict[str, object]:
        return {
            "schema": GRAPH_SCHEMA,
            "name": self.name,
            "source": self.source,
            "hash": self.hash,
            "max_events": self.bounds.events,
            "max_calls": self.bounds.calls,
            "max_tool_calls": self.bounds.tool_calls,
            "max_tokens": self.bounds.tokens,
            "max_paths": self.bounds.paths,
            "loops": dict(self.loops),
            "policies": {k: p.attrs() for k, p in self.policies.items()},
            "agents": {k: a.attrs() for k, a in self.agents.items()},
            "task": self.task.attrs() if self.task else None,
            "tools": {k: t.attrs() for k, t in self.tools.items()},
            "envs": {k: e.attrs() for k, e in self.envs.items()},
            "reward": self.reward.attrs() if self.reward else None,
            "train": self.train.model_dump(),
            "code": [ref.attrs() for ref in self.code],
        }
