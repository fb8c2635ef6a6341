"""Per-role and per-event-type metrics of a step: the keys `role/ROLE/METRIC` and `event/TYPE/METRIC`.

The keys are static (the graph's acting agents and its event types, in graph order), so each
rank sums its share into one fixed-order list and one `all_reduce` makes the sums global. An
event belongs to the agent of its event node; a role's sums are those of its event types.

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

from srpo_dsl.lang.graph import EventGraph

ROLLOUT = ("events", "members", "invalid", "tokens")  # summed over every event of the rollouts
TRAINING = ("rows", "abs_advantage")  # summed over the training rows


class _Member(Protocol):
    valid: bool
    response_token_ids: list[int]


class _Event(Protocol):
    event_type: str
    members: Sequence[_Member]


class _Episode(Protocol):
    events: Sequence[_Event]


class _Rows(Protocol):
    event_types: list[str]
    advantages: Tensor


@dataclass(frozen=True)
class MetricKeys:
    """The graph's roles and event types; `owner[i]` is the index in `roles` of event type i's agent."""

    roles: tuple[str, ...]
    event_types: tuple[str, ...]
    owner: tuple[int, ...]

    @classmethod
    def of(cls, graph: EventGraph) -> MetricKeys:
        nodes = graph.event_nodes
        acting = {v.agent.name for v in nodes}
        roles = tuple(a for a in graph.agents if a in acting)
        return cls(roles, tuple(v.event_type for v in nodes), tuple(roles.index(v.agent.name) for v in nodes))

    @property
    def prefixes(self) -> list[str]:
        """`role/ROLE` of every role, then `event/TYPE` of every event type."""
        return [f"role/{r}" for r in self.roles] + [f"event/{t}" for t in self.event_types]

    def sums(self, values: Tensor, event_types: Sequence[str]) -> Tensor:
        """[roles + event types, C]: the [N, C] `values` of N items (of `event_types`) summed per key."""
        index = {t: i for i, t in enumerate(self.event_types)}
        unknown = next((t for t in event_types if t not in index), None)
        if unknown is not None:
            raise ValueError(f"event type {unknown!r} is not in the workflow's graph")
        slots = torch.tensor([index[t] for t in event_types], dtype=torch.long, device=values.device)
        by_type = values.new_zeros(len(self.event_types), values.shape[1]).index_add(0, slots, values)
        owner = torch.tensor(self.owner, dtype=torch.long, device=values.device)
        by_role = values.new_zeros(len(self.roles), values.shape[1]).index_add(0, owner, by_type)
        return torch.cat([by_role, by_type])

    def ratios(self, name: str, sums: Sequence[float]) -> dict[str, float]:
        """{`PREFIX/name`: numerator / denominator} from flat (numerator, denominator) pairs per key."""
        pairs = zip(self.prefixes, sums[0::2], sums[1::2])
        return {f"{p}/{name}": num / den for p, num, den in pairs if den > 0}


def rollout_sums(keys: MetricKeys, episodes: Sequence[_Episode]) -> Tensor:
    """[keys, 4] float64: events, members, invalid members, response tokens (`ROLLOUT`) per key."""
    events = [e for ep in episodes for e in ep.events]
    values = [
        [
            1,
            len(e.members),
            sum(not m.valid for m in e.members),
            sum(len(m.response_token_ids) for m in e.members),
        ]
        for e in events
    ]
    table = torch.tensor(values, dtype=torch.float64).reshape(len(events), len(ROLLOUT))
    return keys.sums(table, [e.event_type for e in events])


def step_sums(keys: MetricKeys, episodes: Sequence[_Episode], rows: _Rows) -> list[float]:
    """This rank's sums of `ROLLOUT` and `TRAINING` per key, flat (key-major): the input of one all_reduce."""
    advantages = rows.advantages.detach().to("cpu", torch.float64)
    training = keys.sums(torch.stack([torch.ones_like(advantages), advantages.abs()], -1), rows.event_types)
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
