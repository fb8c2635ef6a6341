"""Episodes -> training rows: one row per member of every complete event (docs/objective.md §1, §9).

An incomplete event (a member missing) is dropped whole and counted, never trained on in
part. An invalid output that was resampled (an agent's `retries`) is recorded in its event's `tries`
and trained as a singleton event of its own, of the event's type and round: an invalid action, with
its return (the penalty included). The rows of agents with `trained = false` are left out. Every
row carries its member's return R (the reward of its episode; the most specific of its role's,
replica's and round's when a Python reward keyed its returns: runtime/credit.py; an event's
backed-up return in a branching episode) and the advantage A of the objective's registered
estimator (advantages.py): per event over (prompt, event type) groups for srpo, from the mean of
its members' returns, so all members of one event share one advantage; per episode over its
prompt's episodes for traj (`episode`, from the episode's team return), so all rows of one
episode share one; `state` adds to that a step advantage over the events of the same state key
(`Event.state_key`, an environment's: docs/objective.md §5). A row that continues its member's
conversation (its prompt begins with the previous turn's prompt and response, verbatim) names that row
(`Rows.follows`): the update scores a conversation's rows in one pass over its last row
(docs/training.md, Memory).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from srpo_dsl.rl.objective.advantages import AdvantageInputs
from srpo_dsl.rl.objective.batching import drop_incomplete
from srpo_dsl.rl.objective.losses import Objective, get_objective

T = TypeVar("T")


# What the rows read of an episode, its events and members: `runtime.episode` while training, `runtime.traces`
# read back. Read-only (properties): a frozen `Member` and a pydantic model both provide them.
class _Member(Protocol):
    @property
    def member_index(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def replica(self) -> int: ...
    @property
    def policy(self) -> str: ...
    @property
    def policy_version(self) -> int: ...
    @property
    def prompt_token_ids(self) -> Sequence[int]: ...
    @property
    def response_token_ids(self) -> Sequence[int]: ...
    @property
    def behavior_logprobs(self) -> Sequence[float]: ...


class _Branch(Protocol):
    @property
    def group(self) -> str: ...
    @property
    def kept(self) -> bool: ...
    @property
    def agent(self) -> str | None: ...


class _Event(Protocol):
    @property
    def event_id(self) -> str: ...
    @property
    def event_type(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def state_id(self) -> str: ...
    @property
    def cardinality(self) -> int: ...
    @property
    def complete(self) -> bool: ...
    @property
    def members(self) -> Sequence[_Member]: ...
    @property
    def branch(self) -> _Branch | None: ...
    @property
    def tree_return(self) -> float | None: ...
    @property
    def tries(self) -> Sequence[_Member]: ...
    @property
    def state_key(self) -> str | None: ...


class _Episode(Protocol):
    @property
    def episode_id(self) -> str: ...
    @property
    def prompt_id(self) -> str: ...
    @property
    def events(self) -> Sequence[_Event]: ...
    @property
    def team_return(self) -> float: ...
    @property
    def returns(self) -> Mapping[tuple[str, int], float]: ...


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
    follows: list[int]  # the row it continues (its prompt begins with that row's prompt + response), -1: none
    returns: Tensor  # [N] return R of the row's member (its episode's, unless the reward keyed returns)
    advantages: Tensor  # [N]
    dropped_events: int  # incomplete events left out

    def __len__(self) -> int:
        return len(self.roles)

    @property
    def num_events(self) -> int:
        return int(torch.unique(self.event_ids).numel())

    @property
    def num_episodes(self) -> int:
        return int(torch.unique(self.episode_ids).numel())

    @property
    def response_lengths(self) -> list[int]:
        return [len(r) for r in self.response_token_ids]

    @property
    def lengths(self) -> list[int]:
        """Each row's tokens: its prompt's and its response's."""
        return [len(p) + len(r) for p, r in zip(self.prompt_token_ids, self.response_token_ids)]

    @property
    def new_tokens(self) -> list[int]:
        """Each row's tokens past the row it continues (all of them when it continues none): a conversation
        scored in one pass costs its last row's length once."""
        lengths = self.lengths
        return [n - (lengths[r] if r >= 0 else 0) for n, r in zip(lengths, self.follows)]

    def select(self, index: Sequence[int]) -> Rows:
        """The rows at `index`, in that order (event ids, returns and advantages kept; `follows` as positions
        in `index`, -1 where the row continued is not selected)."""
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
            followed_within(self.follows, index),
            self.returns[idx],
            self.advantages[idx],
            self.dropped_events,
        )


def _pick(column: list[T], index: Sequence[int]) -> list[T]:
    return [column[i] for i in index]


def followed_within(follows: Sequence[int], index: Sequence[int]) -> list[int]:
    """The rows at `index`: each one's continued row as a position in `index` (-1: none, or not there)."""
    position = {row: k for k, row in enumerate(index)}
    return [position.get(follows[i], -1) for i in index]


def _return(ep: _Episode, e: _Event, m: _Member) -> float:
    """A row's return: its event's backed-up return in a branching episode, else its member's, resolved
    when the reward was recorded (`Episode.returns`; not there: the team return)."""
    if e.tree_return is not None:
        return float(e.tree_return)
    return float(ep.returns.get((e.event_id, m.member_index), ep.team_return))


def _siblings(e: _Event) -> tuple[str, str | None] | None:
    """An alternative's sibling key: its pre-action state, and for a crossed sample its agent (each agent's
    N samples are compared among themselves); None: the event is no alternative."""
    return (e.state_id, e.branch.agent) if e.branch is not None else None


Unit = tuple[str, int, int]  # a row's training unit: (its id, K, its member's index within it)


def _rows_of(episodes: Sequence[_Episode]) -> list[tuple[_Episode, _Event, Unit, _Member]]:
    """Every complete event's members, then each of its resampled invalid tries: a try is the singleton
    event of its own (`EVENT/tryN`, K = 1, member 0, the event's type and round)."""
    out = []
    for ep in episodes:
        for e in ep.events:
            if not e.complete:
                continue
            out += [(ep, e, (e.event_id, e.cardinality, m.member_index), m) for m in e.members]
            out += [(ep, e, (f"{e.event_id}/try{i}", 1, 0), t) for i, t in enumerate(e.tries, 1)]
    return out


def continued_rows(episode_ids: Sequence[str], members: Sequence[_Member]) -> list[int]:
    """Row i continues row r (r, else -1) when r is the previous row of the same (episode, role, replica,
    policy) and row i's prompt ids begin with row r's prompt then response ids (checked, never assumed)."""
    last: dict[tuple[str, str, int, str], int] = {}
    follows = []
    for i, (episode, m) in enumerate(zip(episode_ids, members)):
        key = (episode, m.role, m.replica, m.policy)
        r = last.get(key, -1)
        last[key] = i
        turn = [*members[r].prompt_token_ids, *members[r].response_token_ids] if r >= 0 else []
        follows.append(r if r >= 0 and list(m.prompt_token_ids[: len(turn)]) == turn else -1)
    return follows


def dense_ids(keys: Sequence[str]) -> Tensor:
    """[N] long: equal key, equal id; ids 0.. in order of first appearance."""
    dense: dict[str, int] = {}
    return torch.tensor([dense.setdefault(key, len(dense)) for key in keys], dtype=torch.long)


def build_rows(
    episodes: Sequence[_Episode], objective: Objective | str, untrained: Collection[str] = ()
) -> Rows:
    """Rows of the complete events of `episodes`, with the advantages of `objective` (or of the registered
    objective of that name). The rows of `untrained` roles (`trained = false`) are left out before the
    advantages are estimated: a mixed event keeps its trained members only (its set ratio over them,
    K_e their number), an event of untrained roles alone has no row."""
    estimate = (get_objective(objective) if isinstance(objective, str) else objective).advantages
    flat = _rows_of(episodes)
    marked = sum(not e.complete for ep in episodes for e in ep.events)  # recorded incomplete by the executor
    kept, dropped = drop_incomplete(*zip(*(unit for _, _, unit, _ in flat))) if flat else ([], 0)
    flat = [flat[i] for i in kept if flat[i][3].role not in untrained]
    eps, events, units, members = (list(column) for column in zip(*flat)) if flat else ([], [], [], [])
    event_ids = dense_ids([unit[0] for unit in units])
    episode_ids = dense_ids([ep.episode_id for ep in eps])
    prompt_ids = [ep.prompt_id for ep in eps]
    event_types = [e.event_type for e in events]
    roles = [m.role for m in members]
    returns = torch.tensor([_return(*row) for row in zip(eps, events, members)], dtype=torch.float32)
    siblings = [_siblings(e) for e in events]
    keys = [e.state_key for e in events]  # the environments' key of its event's state (`state`)
    team = torch.tensor([float(ep.team_return) for ep in eps], dtype=torch.float32)
    inputs = AdvantageInputs(
        returns,
        event_ids,
        prompt_ids,
        event_types,
        roles,
        episode_ids=episode_ids,
        episode_returns=team,
        siblings=siblings if any(s is not None for s in siblings) else None,
        state_keys=keys if any(k is not None for k in keys) else None,
    )
    return Rows(
        [list(m.prompt_token_ids) for m in members],
        [list(m.response_token_ids) for m in members],
        [list(m.behavior_logprobs) for m in members],
        event_ids,
        episode_ids,
        event_types,
        [e.node for e in events],
        prompt_ids,
        roles,
        [m.policy for m in members],
        [m.policy_version for m in members],
        [(unit[0], m.member_index) for unit, m in zip(units, members)],
        continued_rows([ep.episode_id for ep in eps], members),
        returns,
        estimate(inputs),
        marked + dropped,
    )
