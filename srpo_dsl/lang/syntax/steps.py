"""The step table: every kind of event step, as data that each stage of the language reads.

An event step is a keyword, an agent and an optional selector: `verify verifier`, `revise solver[2]`,
`parallel solver by router`. Its kind (the keyword) is looked up in `STEP_KINDS` for:
- syntax: the grammar's `step_keyword` rule has one alternative per entry (`grammar.py` adds them);
- cardinality: the forms its members may be chosen in (`FORMS`: one replica, a fixed set, or the
  replicas a router chose), hence the event's K;
- contracts: the output contracts an agent must emit to take the step (the checker's E045);
- effects: what acting does to the episode, in order (the checker and the compiler read `record` and
  `route`; the executor runs each effect's handler from `srpo_dsl.runtime.effects`);
- shape: how exports draw its nodes.

A new kind is one `register_step(StepKind(...))` before parsing; an effect of its own also needs its
handler on `srpo_dsl.runtime.effects.EFFECTS` (docs/dsl.md, "Adding a step kind").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from srpo_dsl.lang.syntax.nodes import EventStep
from srpo_dsl.registries import Registry

Cardinality = Literal["singleton", "pool", "routed"]

# Effects the language itself reads (the executor runs them like any other):
RECORD = "record"  # the agent's parsed value is its recorded decision, which conditions test
ROUTE = (
    "route"  # ... a selection of a pool's replicas or STOP: `KIND P by R` acts on it, STOP leaves the loop
)
_DECIDING = (RECORD, ROUTE)

_KEYWORD = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Shape:
    """How exports draw a node: Mermaid's brackets around the label, and Graphviz's node shape."""

    mermaid_open: str
    mermaid_close: str
    dot: str


@dataclass(frozen=True)
class StepKind:
    """One kind of event step (an entry of the step table)."""

    keyword: str  # what the step is written with; reserved from then on, like every keyword
    cardinality: frozenset[Cardinality]  # its forms: {"singleton"}, or some of {"pool", "routed"}
    contracts: frozenset[str] | None  # the agent must emit one of these; None: any that no kind decides with
    effects: tuple[str, ...]  # on the episode once its members are committed, in order
    shape: Shape

    def __post_init__(self) -> None:
        if not _KEYWORD.fullmatch(self.keyword):
            raise ValueError(f"step keyword {self.keyword!r}: lower-case letters, digits and `_`")
        forms = set(self.cardinality)
        if not forms or not forms <= set(FORMS) or ("singleton" in forms and len(forms) > 1):
            raise ValueError(
                f"step kind `{self.keyword}`: cardinality is {{'singleton'}} or a non-empty subset of "
                f"{{'pool', 'routed'}}, not {sorted(forms)}"
            )

    @property
    def decides(self) -> bool:
        """Whether its agent's value is recorded as a decision (its contracts are then decisions)."""
        return any(e in _DECIDING for e in self.effects)

    @property
    def routes(self) -> bool:
        return ROUTE in self.effects


class Members(NamedTuple):
    """Who acts in a step's event, as the compiled graph holds it."""

    replicas: tuple[int, ...]  # member slots, 1-based (routed: the whole pool; the router picks)
    cardinality: tuple[int, int]  # (min K, max K)
    label: str


def _one(step: EventStep, pool_size: int) -> Members:
    replica = step.replicas[0] if step.replicas else 1
    return Members((replica,), (1, 1), f"{step.kind} {step.agent.name}")


def _fixed(step: EventStep, pool_size: int) -> Members:
    replicas = step.replicas or tuple(range(1, pool_size + 1))
    k = len(replicas)
    size = f" K={k}" if pool_size > 1 else ""
    return Members(replicas, (k, k), f"{step.kind} {step.agent.name}{size}")


def _routed(step: EventStep, pool_size: int) -> Members:
    assert step.by is not None
    replicas = tuple(range(1, pool_size + 1))
    return Members(replicas, (1, len(replicas)), f"{step.kind} {step.agent.name} by {step.by.name}")


@dataclass(frozen=True)
class Form:
    """One way of choosing an event's members (a cardinality)."""

    syntax: str  # as a user reads it; `{kw}` stands for the keyword
    members: Callable[[EventStep, int], Members]  # (the step, its agent's pool size)


FORMS: dict[Cardinality, Form] = {
    "singleton": Form("one replica (`{kw} A` or `{kw} A[i]`)", _one),
    "pool": Form("a fixed set of replicas (`{kw} P` or `{kw} P[i, j]`)", _fixed),
    "routed": Form("the replicas a router chose (`{kw} P by R`)", _routed),
}

STEP_KINDS: Registry[StepKind] = Registry("step kind")


def register_step(kind: StepKind) -> StepKind:
    """Add a kind to the table (before parsing the files that use it)."""
    STEP_KINDS.add(kind.keyword, kind)
    return kind


def step_keywords() -> tuple[str, ...]:
    return tuple(STEP_KINDS)


def written_form(step: EventStep) -> Cardinality:
    """The form a step is written in: `by R` is routed; else its kind's pool, or one replica."""
    if step.by is not None:
        return "routed"
    if step.others:  # `KIND A, B`: every replica of each agent, one set
        return "pool"
    if "pool" in STEP_KINDS[step.kind].cardinality or (step.replicas and len(step.replicas) > 1):
        return "pool"
    return "singleton"


def takes(step: EventStep) -> bool:
    """Whether the step's kind takes the form it is written in (else the checker's E047)."""
    return written_form(step) in STEP_KINDS[step.kind].cardinality


def members(step: EventStep, pool_size: int) -> Members:
    """Who acts in a step its kind takes (`takes(step)`), its (first) agent having `pool_size` replicas.
    A mixed step's other agents are listed by the compiler (`EventNode.slots`)."""
    return FORMS[written_form(step)].members(step, pool_size)


def deciding(contract: str) -> tuple[str, ...]:
    """The keywords of the kinds that record a decision in `contract`: its agents act only in those."""
    return tuple(k.keyword for k in STEP_KINDS.values() if k.decides and contract in (k.contracts or ()))


def routers() -> tuple[StepKind, ...]:
    """The kinds whose decision is a selection of replicas (`KIND P by R` reads it)."""
    return tuple(k for k in STEP_KINDS.values() if k.routes)


# ---- the built-in kinds ------------------------------------------------------------------------------
_ONE: frozenset[Cardinality] = frozenset({"singleton"})
for _kind in (
    StepKind("route", _ONE, frozenset({"route"}), (ROUTE,), Shape("{{", "}}", "diamond")),
    StepKind("parallel", frozenset({"pool", "routed"}), None, (), Shape("[[", "]]", "box3d")),
    StepKind("verify", _ONE, frozenset({"verdict"}), (RECORD, "feedback"), Shape("{", "}", "diamond")),
    StepKind("revise", _ONE, None, (), Shape("[/", "/]", "box")),
    StepKind("aggregate", _ONE, None, (), Shape("([", "])", "box")),
    StepKind("act", frozenset({"pool", "routed"}), None, (), Shape("[", "]", "box")),
):
    register_step(_kind)
