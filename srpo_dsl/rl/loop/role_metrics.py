"""Per-role and per-event-type metrics of a step: the keys `role/ROLE/METRIC` and `event/TYPE/METRIC`.

The keys are static (the graph's acting agents and its event types, in graph order), so each
rank sums its share into one fixed-order list and one `all_reduce` makes the sums global. An
event counts for its event type, and for each role with members in it (a mixed set: for each of its
agents), with that role's members.

    events           events of the step's rollouts (every event, incomplete ones too)
    mean_k           members per event
    invalid_rate     invalid members / members
    response_length  response tokens per member
    abs_advantage    mean |A| over the training rows (each member of a trained event once)
    clip_fraction    clipped units / units of the objective (srpo: events, grpo and drmas:
                     tokens, seq: rows), over every epoch of the update

A ratio whose denominator is 0 in a step (e.g. a role no episode reached) is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from srpo_dsl.lang.compile.graph import EventGraph

ROLLOUT = ("events", "members", "invalid", "tokens")  # summed over every event of the rollouts
TRAINING = ("rows", "abs_advantage")  # summed over the training rows


class _Member(Protocol):
    role: str
    valid: bool
    response_token_ids: list[int]


class _Event(Protocol):
    event_type: str
    members: Sequence[_Member]


class _Episode(Protocol):
    events: Sequence[_Event]


class _Rows(Protocol):
    event_types: list[str]
    roles: list[str]
    advantages: Tensor


@dataclass(frozen=True)
class MetricKeys:
    """The graph's acting roles and its event types, in graph order."""

    roles: tuple[str, ...]
    event_types: tuple[str, ...]

    @classmethod
    def of(cls, graph: EventGraph) -> MetricKeys:
        nodes = graph.event_nodes
        acting = {a.name for v in nodes for a in v.agents}  # a mixed set's agents each act in it
        return cls(tuple(a for a in graph.agents if a in acting), tuple(v.event_type for v in nodes))

    @property
    def prefixes(self) -> list[str]:
        """`role/ROLE` of every role, then `event/TYPE` of every event type."""
        return [f"role/{r}" for r in self.roles] + [f"event/{t}" for t in self.event_types]

    def sums(
        self, by_role: Tensor, roles: Sequence[str], by_type: Tensor, event_types: Sequence[str]
    ) -> Tensor:
        """[roles + event types, C]: the rows of `by_role` summed per their role, then the rows of
        `by_type` per their event type (the two tables may differ: a mixed event is one row per type
        but one per role that acted in it)."""
        type_sums = _summed(by_type, event_types, self.event_types, "event type")
        return torch.cat([_summed(by_role, roles, self.roles, "role"), type_sums])

    def ratios(self, name: str, sums: Sequence[float]) -> dict[str, float]:
        """{`PREFIX/name`: numerator / denominator} from flat (numerator, denominator) pairs per key."""
        pairs = zip(self.prefixes, sums[0::2], sums[1::2])
        return {f"{p}/{name}": num / den for p, num, den in pairs if den > 0}


def _summed(values: Tensor, names: Sequence[str], keys: Sequence[str], what: str) -> Tensor:
    """[len(keys), C]: the [N, C] `values` summed per name; a name not among `keys` is a ValueError."""
    index = {k: i for i, k in enumerate(keys)}
    unknown = next((x for x in names if x not in index), None)
    if unknown is not None:
        raise ValueError(f"{what} {unknown!r} is not in the workflow's graph")
    slots = torch.tensor([index[x] for x in names], dtype=torch.long, device=values.device)
    return values.new_zeros(len(keys), values.shape[1]).index_add(0, slots, values)


def _counts(members: Sequence[_Member]) -> list[float]:
    """One row of `ROLLOUT`: an event (or a role's part of it), its members, invalid ones, tokens."""
    tokens = sum(len(m.response_token_ids) for m in members)
    return [1, len(members), sum(not m.valid for m in members), tokens]


def rollout_sums(keys: MetricKeys, episodes: Sequence[_Episode]) -> Tensor:
    """[keys, 4] float64: events, members, invalid members, response tokens (`ROLLOUT`) per key; a role's
    events are those it had members in."""
    events = [e for ep in episodes for e in ep.events]
    parts = [
        (role, [m for m in e.members if m.role == role])
        for e in events
        for role in dict.fromkeys(m.role for m in e.members)
    ]
    by_type = torch.tensor([_counts(e.members) for e in events], dtype=torch.float64)
    by_role = torch.tensor([_counts(ms) for _, ms in parts], dtype=torch.float64)
    return keys.sums(
        by_role.reshape(len(parts), len(ROLLOUT)),
        [r for r, _ in parts],
        by_type.reshape(len(events), len(ROLLOUT)),
        [e.event_type for e in events],
    )


def step_sums(keys: MetricKeys, episodes: Sequence[_Episode], rows: _Rows) -> list[float]:
    """This rank's sums of `ROLLOUT` and `TRAINING` per key, flat (key-major): the input of one all_reduce."""
    advantages = rows.advantages.detach().to("cpu", torch.float64)
    table = torch.stack([torch.ones_like(advantages), advantages.abs()], -1)
    training = keys.sums(table, rows.roles, table, rows.event_types)
    return torch.cat([rollout_sums(keys, episodes), training], 1).flatten().tolist()


def keyed_metrics(keys: MetricKeys, sums: Sequence[float], clip: Mapping[str, float]) -> dict[str, float]:
    """The step's keyed metrics from the global `step_sums` and the update's `PREFIX/clip_fraction`."""
    width = len(ROLLOUT) + len(TRAINING)
    out: dict[str, float] = {}
    for i, prefix in enumerate(keys.prefixes):
        events, members, invalid, tokens, rows, advantage = sums[i * width : (i + 1) * width]
        out[f"{prefix}/events"] = events
        for name, num, den in (
            ("mean_k", members, events),
            ("invalid_rate", invalid, members),
            ("response_length", tokens, members),
            ("abs_advantage", advantage, rows),
        ):
            if den > 0:
                out[f"{prefix}/{name}"] = num / den
        if f"{prefix}/clip_fraction" in clip:
            out[f"{prefix}/clip_fraction"] = clip[f"{prefix}/clip_fraction"]
    return out


def role_invalid_sums(keys: MetricKeys, episodes: Sequence[_Episode]) -> list[float]:
    """(invalid members, members) per role, flat: the input of an all_reduce."""
    counts = rollout_sums(keys, episodes)[: len(keys.roles)]
    return counts[:, [2, 1]].flatten().tolist()


def role_invalid_rates(keys: MetricKeys, sums: Sequence[float]) -> dict[str, float]:
    """{role: invalid-output rate} from `role_invalid_sums`; roles without outputs are left out."""
    pairs = zip(keys.roles, sums[0::2], sums[1::2])
    return {role: invalid / members for role, invalid, members in pairs if members > 0}
