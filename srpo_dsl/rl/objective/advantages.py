"""Group-relative advantages (docs/objective.md §5) and the registry of the estimators objectives name.

    A = (R - mean_g) / (std_g + eps)          std_g: population std (unbiased=False)
    A = 0 exactly                             a group whose returns are equal (group_advantages)

    event   groups (prompt, event type); one sample per EVENT (the mean of its rows' returns)
            in mean_g, std_g; A_e on its rows                                                 (srpo)
    row     groups (prompt, event type); one sample per row                                     (grpo, seq)
    agent   groups (prompt, role): Dr. MAS's agent-wise normalisation; one sample per row       (drmas)
    episode groups (prompt); one sample per EPISODE (its team return): the G rollouts of a question,
            A on every row of every event of the episode (Search-R1, verl's multi-turn GRPO)     (traj)
    state   GiGPO: the `episode` advantage plus STATE_WEIGHT x a step advantage, groups (prompt,
            event type, state key), one sample per event; an event without a key groups with the
            keyless events of its (prompt, event type)                                  (advantage = state)

Every estimator groups the alternatives of a `branch` step by the pre-action state they were sampled
from (`siblings`: their state id): their siblings, and the alternatives of other rollouts only where
those reached exactly the same state (at an episode's first decision, all G rollouts' do), never "the
same step in G rollouts" whatever their states (docs/objective.md, "Branching rollouts"); rows of
events that are no alternative have sibling None and group as above.

Each objective names its estimator when it is registered (losses.py), so nothing here
or in the rows branches on an objective's name. The estimators are the entries of
`srpo_dsl.registries.ADVANTAGE_ESTIMATORS`; `register_advantage_estimator` adds one, and a
workflow may name a user's function instead (`train with (advantage = "file.py:function")`,
plugins.py). An estimator is `(inputs: AdvantageInputs, eps: float) -> [N] float Tensor`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from srpo_dsl.registries import ADVANTAGE_ESTIMATORS
from srpo_dsl.rl.objective.setwise import at_least_fp32


@dataclass(frozen=True)
class AdvantageInputs:
    """One entry per row: the return R of its member, its event, prompt, event type and role; its
    episode with the episode's team return (None when the caller has no episodes: `episode` needs
    them); and the pre-action state of its event when it is an alternative of a `branch` step."""

    returns: Tensor  # [N] float
    event_ids: Tensor  # [N] int, equal id = one event
    prompt_ids: Sequence[Hashable]
    event_types: Sequence[Hashable]
    roles: Sequence[Hashable]
    episode_ids: Tensor | None = None  # [N] int, equal id = one episode
    episode_returns: Tensor | None = None  # [N] float, the team return of the row's episode (its team_return)
    siblings: Sequence[Hashable | None] | None = None  # an alternative's state; None: no row is one
    state_keys: Sequence[Hashable | None] | None = None  # its event's state key; None: no row has one

    def __post_init__(self) -> None:
        n = self.returns.numel()
        tensors: dict[str, Tensor | None] = {"returns": self.returns, "event_ids": self.event_ids}
        tensors |= {"episode_ids": self.episode_ids, "episode_returns": self.episode_returns}
        wrong = {name: tuple(t.shape) for name, t in tensors.items() if t is not None and t.shape != (n,)}
        if wrong:
            shapes = ", ".join(f"{name} {shape}" for name, shape in wrong.items())
            raise ValueError(f"returns, event_ids, episode_ids and episode_returns must be [N], got {shapes}")
        if not len(self.prompt_ids) == len(self.event_types) == len(self.roles) == n:
            raise ValueError("returns, event_ids, prompt_ids, event_types and roles need one entry per row")
        if self.siblings is not None and len(self.siblings) != n:
            raise ValueError("siblings needs one entry per row")
        if self.state_keys is not None and len(self.state_keys) != n:
            raise ValueError("state_keys needs one entry per row")

    def groups(self, *keys: Sequence[Hashable]) -> Tensor:
        """Dense group ids of `keys`, an alternative's rows grouped by their state too."""
        if self.siblings is None:
            return group_index(*keys)
        return group_index(*keys, self.siblings)


Estimator = Callable[[AdvantageInputs, float], Tensor]
register_advantage_estimator = ADVANTAGE_ESTIMATORS.register
get_advantage_estimator = ADVANTAGE_ESTIMATORS.lookup


def group_index(*keys: Sequence[Hashable]) -> Tensor:
    """Dense int id per row of the tuple of its keys, in order of first appearance: [N] long."""
    index: dict[tuple[Hashable, ...], int] = {}
    return torch.tensor([index.setdefault(key, len(index)) for key in zip(*keys)], dtype=torch.long)


# A group whose std is at most this many ulps (of the returns' dtype) of its largest |R| is all equal.
EQUAL_ULPS = 16


def group_advantages(returns: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """A_i = (R_i - mean_g) / (std_g + eps) within each group g (any int ids).

    std is the population standard deviation (unbiased=False). A singleton group, or a group whose
    returns are all equal, gets advantage 0 bit for bit: the statistics are taken in float64 on the
    returns minus one member of their group (equal returns differ by exact zeros), and a group whose
    std is at most EQUAL_ULPS ulps of the returns' dtype times its largest |R| counts as equal (the
    rounding of returns that were computed apart is no signal). The result has the returns' dtype
    (at least float32).
    """
    if returns.shape != group_ids.shape or returns.dim() != 1:
        raise ValueError(
            f"returns and group_ids must be [N], got {tuple(returns.shape)} and {tuple(group_ids.shape)}"
        )
    dtype = at_least_fp32(returns).dtype
    groups, inverse = torch.unique(group_ids, return_inverse=True)
    r = returns.to(torch.float64)
    zeros = r.new_zeros(groups.numel())
    count = torch.bincount(inverse, minlength=groups.numel()).to(r.dtype)
    shifted = r - r[first_rows(inverse, groups.numel())][inverse]  # centred on a member: exact for equal R
    centred = shifted - (zeros.index_add(0, inverse, shifted) / count)[inverse]
    std = (zeros.index_add(0, inverse, centred.square()) / count).sqrt()
    scale = zeros.scatter_reduce(0, inverse, r.abs(), "amax", include_self=False)
    equal = std <= EQUAL_ULPS * torch.finfo(dtype).eps * scale
    advantages = centred / (std[inverse] + eps)
    return torch.where(equal[inverse], torch.zeros_like(advantages), advantages).to(dtype)


def first_rows(inverse: Tensor, num_groups: int) -> Tensor:
    """The first row of each of `num_groups` groups, `inverse` being each row's group: [num_groups] long."""
    rows = torch.arange(inverse.numel(), device=inverse.device)
    return rows.new_full((num_groups,), inverse.numel()).scatter_reduce(0, inverse, rows, "amin")


def event_advantages(returns: Tensor, group_ids: Tensor, event_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """group_advantages with one sample per EVENT, repeated on its rows: [N] -> [N].

    Row-level inputs (each row carries its member's return and its event's group); an event's
    return is the mean of its rows' (docs/objective.md §5: the set's return, the common one when
    its members share it: exactly, taken like the group's mean on a member), and the group mean and
    std are taken over events, so a K=5 event does not weigh five times a singleton.
    """
    dtype = at_least_fp32(returns).dtype
    events, inverse = torch.unique(event_ids, return_inverse=True)
    r = returns.to(torch.float64)
    size = torch.bincount(inverse, minlength=events.numel()).to(r.dtype)
    first = first_rows(inverse, events.numel())
    spread = r.new_zeros(events.numel()).index_add(0, inverse, r - r[first][inverse]) / size
    event_return = (r[first] + spread).to(dtype)
    return group_advantages(event_return, group_ids[first], eps)[inverse]


def per_event(inputs: AdvantageInputs, eps: float = 1e-6) -> Tensor:
    """SRPO: groups (prompt, event type), one sample per event."""
    groups = inputs.groups(inputs.prompt_ids, inputs.event_types)
    return event_advantages(inputs.returns, groups, inputs.event_ids, eps)


def per_row(inputs: AdvantageInputs, eps: float = 1e-6) -> Tensor:
    """GRPO: groups (prompt, event type), one sample per row (response)."""
    groups = inputs.groups(inputs.prompt_ids, inputs.event_types)
    return group_advantages(inputs.returns, groups, eps)


def per_agent(inputs: AdvantageInputs, eps: float = 1e-6) -> Tensor:
    """Dr. MAS: groups (prompt, role), one sample per row."""
    groups = inputs.groups(inputs.prompt_ids, inputs.roles)
    return group_advantages(inputs.returns, groups, eps)


def per_episode(inputs: AdvantageInputs, eps: float = 1e-6) -> Tensor:
    """Search-R1 / verl's multi-turn GRPO: groups (prompt), one sample per episode (its team return),
    the episode's advantage on all its rows."""
    return episode_level(inputs, eps, "episode")


def episode_level(inputs: AdvantageInputs, eps: float, estimator: str) -> Tensor:
    """`per_episode`'s advantages; a ValueError naming `estimator` when the inputs have no episodes."""
    if inputs.episode_ids is None or inputs.episode_returns is None:
        raise ValueError(f"the `{estimator}` estimator needs each row's episode_ids and episode_returns")
    groups = group_index(inputs.prompt_ids)
    return event_advantages(inputs.episode_returns, groups, inputs.episode_ids, eps)


STATE_WEIGHT = 1.0  # GiGPO's weight of the step advantage (its default)


def state_advantages(inputs: AdvantageInputs, eps: float = 1e-6, weight: float = STATE_WEIGHT) -> Tensor:
    """GiGPO's two levels: A = A_episode + weight * A_step.

    A_episode is `per_episode`'s (the team return over the prompt's episodes). A_step normalises each
    event's return R (the mean of its rows', as `event`) over the events of the prompt's episodes of
    the same event type that acted from the same state key (an environment's, `Event.state_key`),
    one sample per event; events without a key form their (prompt, event type) group apart."""
    episode = episode_level(inputs, eps, "state")
    keys = inputs.state_keys if inputs.state_keys is not None else [None] * inputs.returns.numel()
    groups = inputs.groups(inputs.prompt_ids, inputs.event_types, keys)
    step = event_advantages(inputs.returns, groups, inputs.event_ids, eps)
    return episode + weight * step


def per_state(inputs: AdvantageInputs, eps: float = 1e-6) -> Tensor:
    """GiGPO (`advantage = state`): `state_advantages` with the weight STATE_WEIGHT."""
    return state_advantages(inputs, eps)
