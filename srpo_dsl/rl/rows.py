"""Episodes -> training rows: one row per member of every complete event (SRPO.md §3).

An incomplete event (a member missing) is dropped whole and counted, never trained on in
part. Every row carries its member's return R (the reward of its episode; the most specific of
its role's, replica's and round's when a Python reward keyed its returns: runtime/credit.py) and
the advantage A of the objective's registered estimator (advantages.py): per event over
(prompt, event type) groups for srpo, from the mean of its members' returns, so all members of
one event share one advantage; per episode over its prompt's episodes for traj (`episode`, from
the episode's team return), so all rows of one episode share one (docs/objective.md §5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from srpo_dsl.rl.advantages import AdvantageInputs
from srpo_dsl.rl.batching import drop_incomplete
from srpo_dsl.rl.objectives import Objective, get_objective
from srpo_dsl.runtime.credit import role_rounds


class _Member(Protocol):
    member_index: int
    role: str
    replica: int
    policy: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    behavior_logprobs: list[float]


class _Event(Protocol):
    event_id: str
    event_type: str
    node: str
    cardinality: int
    complete: bool
    members: Sequence[_Member]


class _Episode(Protocol):
    episode_id: str
    prompt_id: str
    reward: float
    events: Sequence[_Event]

    def return_of(self, role: str, replica: int | None = None, round: int | None = None) -> float: ...


@dataclass(frozen=True)
class Rows:
    """Column-wise training rows; `event_ids` and `episode_ids` are dense ints (equal id = one event,
    one episode)."""

    prompt_token_ids: list[list[int]]
    response_token_ids: list[list[int]]
    behavior_logprobs: list[list[float]]
    event_ids: Tensor  # [N] long
    episode_ids: Tensor  # [N] long
    event_types: list[str]
    nodes: list[str]  # graph node of the event (its sampling settings)
    prompt_ids: list[str]
    roles: list[str]
    policies: list[str]
    versions: list[int]  # the policy version each row was generated with (its weights' optimizer steps)
    members: list[tuple[str, int]]  # (event id, member index): the row's member in the traces
    returns: Tensor  # [N] return R of the row's member (its episode's, unless the reward keyed returns)
    advantages: Tensor  # [N]
    dropped_events: int  # incomplete events left out

    def __len__(self) -> int:
        return len(self.roles)

    @property
    def num_events(self) -> int:
        return int(self.event_ids.unique().numel())

    @property
    def num_episodes(self) -> int:
        return int(self.episode_ids.unique().numel())

    @property
    def response_lengths(self) -> list[int]:
        return [len(r) for r in self.response_token_ids]

    def select(self, index: Sequence[int]) -> Rows:
        """The rows at `index`, in that order (event ids, returns and advantages kept)."""
        idx = torch.as_tensor(list(index), dtype=torch.long)
        return Rows(
            _pick(self.prompt_token_ids, index),
            _pick(self.response_token_ids, index),
            _pick(self.behavior_logprobs, index),
            self.event_ids[idx],
            self.episode_ids[idx],
            _pick(self.event_types, index),
            _pick(self.nodes, index),
            _pick(self.prompt_ids, index),
            _pick(self.roles, index),
            _pick(self.policies, index),
            _pick(self.versions, index),
            _pick(self.members, index),
            self.returns[idx],
            self.advantages[idx],
            self.dropped_events,
        )


def _pick(column: list, index: Sequence[int]) -> list:
    return [column[i] for i in index]


def dense_ids(keys: Sequence[str]) -> Tensor:
    """[N] long: equal key, equal id; ids 0.. in order of first appearance."""
    dense: dict[str, int] = {}
    return torch.tensor([dense.setdefault(key, len(dense)) for key in keys], dtype=torch.long)


def build_rows(episodes: Sequence[_Episode], objective: Objective | str) -> Rows:
    """Rows of the complete events of `episodes`, with the advantages of `objective` (or of the registered
    objective of that name)."""
    estimate = (get_objective(objective) if isinstance(objective, str) else objective).advantages
    flat = [(ep, e, m) for ep in episodes for e in ep.events if e.complete for m in e.members]
    marked = sum(not e.complete for ep in episodes for e in ep.events)  # recorded incomplete by the executor
    kept, dropped = drop_incomplete(
        [e.event_id for _, e, _ in flat],
        [e.cardinality for _, e, _ in flat],
        [m.member_index for _, _, m in flat],
    )
    flat = [flat[i] for i in kept]
    event_ids = dense_ids([e.event_id for _, e, _ in flat])
    episode_ids = dense_ids([ep.episode_id for ep, _, _ in flat])
    prompt_ids = [ep.prompt_id for ep, _, _ in flat]
    event_types = [e.event_type for _, e, _ in flat]
    roles = [m.role for _, _, m in flat]
    round_of = {e.event_id: r for ep in episodes for e, r in zip(ep.events, role_rounds(ep.events))}
    returns = torch.tensor(
        [float(ep.return_of(m.role, m.replica, round_of[e.event_id][m.role])) for ep, e, m in flat],
        dtype=torch.float32,
    )
    team = torch.tensor([float(ep.reward) for ep, _, _ in flat], dtype=torch.float32)
    inputs = AdvantageInputs(returns, event_ids, prompt_ids, event_types, roles, episode_ids, team)
    advantages = estimate(inputs)
    return Rows(
        [list(m.prompt_token_ids) for _, _, m in flat],
        [list(m.response_token_ids) for _, _, m in flat],
        [list(m.behavior_logprobs) for _, _, m in flat],
        event_ids,
        episode_ids,
        event_types,
        [e.node for _, e, _ in flat],
        prompt_ids,
        roles,
        [m.policy for _, _, m in flat],
        [m.policy_version for _, _, m in flat],
        [(e.event_id, m.member_index) for _, e, m in flat],
        returns,
        advantages,
        marked + dropped,
    )
