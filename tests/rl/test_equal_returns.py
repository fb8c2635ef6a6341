"""Equal returns get advantage 0, bit for bit, in every estimator (issue 45, docs/objective.md §5).

The returns are drawn from values float32 cannot represent (-0.4, 0.7, 0.1, ...): summed in float32
one element at a time, a group of eight -0.4 had mean off by an ulp, centred values of 3e-8, a std as
small, and advantages of +0.0289. Each estimator is checked against a float64 reference written here
from the definitions (one loop per group), to 1e-6.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from srpo_dsl.registries import OBJECTIVES
from srpo_dsl.rl.objective.advantages import (
    EQUAL_ULPS,
    AdvantageInputs,
    event_advantages,
    get_advantage_estimator,
    group_advantages,
)
from srpo_dsl.rl.objective.losses import get_objective
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime.episode import Episode, Event, Member

EPS = 1e-6
TOL = EQUAL_ULPS * float(np.finfo(np.float32).eps)  # the returns are float32, as build_rows makes them
PROPERTY = settings(max_examples=300, deadline=None, derandomize=True)

# Values float32 cannot represent: tenths, hundredths and thirds that are no binary fraction, and any float
# (moved to the next float64 when it happens to be a float32).
DIGIT = st.sampled_from([1, 2, 3, 4, 6, 7, 8, 9])
UNREPRESENTABLE = st.one_of(
    st.builds(lambda m, d: m + d / 10, st.integers(-10, 10), DIGIT),
    st.builds(lambda m, d: m / 10 + d / 100, st.integers(-100, 100), DIGIT),
    st.builds(lambda m, d: m + d / 3, st.integers(-10, 10), st.sampled_from([1, 2])),
    st.floats(-1e3, 1e3, allow_nan=False).map(
        lambda x: x if float(np.float32(x)) != x else math.nextafter(x, math.inf)
    ),
)


def bit_zero(t: torch.Tensor) -> bool:
    """Every entry is +0.0 (not -0.0, not a denormal)."""
    return bool((t == 0).all()) and not bool(torch.signbit(t).any())


def reference_groups(returns: Sequence[float], groups: Sequence[Hashable]) -> list[float]:
    """(R - mean_g) / (std_g + eps) in float64, one group at a time; 0 where std_g <= TOL * max|R_g|."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [0.0] * len(returns)
    for rows in members.values():
        r = np.array([returns[i] for i in rows], dtype=np.float64)
        std = r.std()
        if std > TOL * np.abs(r).max():
            for i, a in zip(rows, (r - r.mean()) / (std + EPS)):
                out[i] = float(a)
    return out


def reference_events(
    returns: Sequence[float], groups: Sequence[Hashable], events: Sequence[int]
) -> list[float]:
    """One sample per event (the mean of its rows' returns, rounded to float32 as stored), repeated on its rows."""
    rows_of: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        rows_of[e].append(i)
    order = list(rows_of)
    means = [float(np.float32(np.mean([returns[i] for i in rows_of[e]], dtype=np.float64))) for e in order]
    per_event = dict(zip(order, reference_groups(means, [groups[rows_of[e][0]] for e in order])))
    return [per_event[e] for e in events]


def f32(values: Sequence[float]) -> list[float]:
    return [float(np.float32(v)) for v in values]


# --- group_advantages -------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-0.4, 0.7, 0.1, 1 / 3, -2.2, 1e-3, 123.456])
def test_equal_returns_are_zero_for_every_group_size(value: float) -> None:
    for size in range(1, 65):
        got = group_advantages(torch.full((size,), value), torch.zeros(size, dtype=torch.long))
        assert bit_zero(got), (value, size, got)


@PROPERTY
@given(st.integers(1, 64), UNREPRESENTABLE, st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
def test_equal_returns_are_zero_in_any_dtype(size: int, value: float, dtype: torch.dtype) -> None:
    got = group_advantages(torch.full((size,), value, dtype=dtype), torch.zeros(size, dtype=torch.long))
    assert bit_zero(got)


# One group: its size 1-64, and either one value for all or values of its own.
GROUP = st.integers(1, 64).flatmap(
    lambda n: st.tuples(st.just(n), st.booleans(), st.lists(UNREPRESENTABLE, min_size=n, max_size=n))
)


def draw_groups(groups: list[tuple[int, bool, list[float]]]) -> tuple[list[float], list[int], list[bool]]:
    """Flat returns (float32), group ids, and whether each row's group is all equal; groups interleaved."""
    returns, ids, equal = [], [], []
    for g, (size, same, values) in enumerate(groups):
        returns += f32([values[0]] * size if same else values[:size])
        ids += [g] * size
        equal += [same] * size
    order = sorted(range(len(ids)), key=lambda i: (i * 7919) % len(ids))  # rows of a group are not adjacent
    return [returns[i] for i in order], [ids[i] for i in order], [equal[i] for i in order]


@PROPERTY
@given(st.lists(GROUP, min_size=1, max_size=6))
def test_group_advantages_agree_with_a_float64_reference(groups) -> None:
    returns, ids, equal = draw_groups(groups)
    got = group_advantages(torch.tensor(returns), torch.tensor(ids))
    assert bit_zero(got[torch.tensor(equal)])
    np.testing.assert_allclose(got.numpy(), reference_groups(returns, ids), rtol=0, atol=1e-6)


def test_a_spread_below_the_tolerance_is_equal_and_one_above_is_not() -> None:
    """Two returns one float32 ulp apart (what returns computed apart may round to) are no signal; 1e-3 apart is."""
    ids = torch.zeros(4, dtype=torch.long)
    ulp_apart = torch.tensor([0.3, 0.3, 0.3, 0.3]).nextafter(torch.tensor(1.0)) * torch.tensor([1, 0, 1, 0])
    ulp_apart += torch.tensor([0.0, 0.3, 0.0, 0.3])
    assert len(set(ulp_apart.tolist())) == 2
    assert bit_zero(group_advantages(ulp_apart, ids))
    apart = torch.tensor([0.301, 0.3, 0.301, 0.3])
    expected = 0.0005 / (0.0005 + EPS)  # mean 0.3005, population std 0.0005
    torch.testing.assert_close(
        group_advantages(apart, ids), torch.tensor([1, -1, 1, -1]) * expected, rtol=1e-4, atol=0
    )


# --- event_advantages: events of 1-5 members --------------------------------------------------

EVENT = st.tuples(
    st.integers(0, 3), st.integers(1, 5), UNREPRESENTABLE, st.lists(UNREPRESENTABLE, min_size=5, max_size=5)
)


def draw_events(events, shared: bool) -> tuple[list[float], list[int], list[int]]:
    """Rows of events (group, K, return, member returns): every member the event's return, or its own when
    not `shared`; a group's events all have group 0's first return when `shared`."""
    returns, groups, ids = [], [], []
    for e, (group, k, _, own) in enumerate(events):
        returns += f32([events[0][2]] * k if shared else own[:k])
        groups += [group] * k
        ids += [100 + e] * k
    return returns, groups, ids


@PROPERTY
@given(st.lists(EVENT, min_size=1, max_size=12))
def test_events_of_equal_returns_are_zero_whatever_their_sizes(events) -> None:
    returns, groups, ids = draw_events(events, shared=True)
    got = event_advantages(torch.tensor(returns), torch.tensor(groups), torch.tensor(ids))
    assert bit_zero(got)


@PROPERTY
@given(st.lists(EVENT, min_size=1, max_size=12))
def test_event_advantages_agree_with_a_float64_reference(events) -> None:
    returns, groups, ids = draw_events(events, shared=False)
    got = event_advantages(torch.tensor(returns), torch.tensor(groups), torch.tensor(ids))
    np.testing.assert_allclose(got.numpy(), reference_events(returns, groups, ids), rtol=0, atol=1e-6)


# --- every built-in estimator, with branch alternatives (siblings) ---------------------------

ROW = st.tuples(
    st.integers(0, 1),  # prompt
    st.integers(0, 1),  # event type
    st.integers(0, 1),  # role
    st.integers(0, 3),  # episode (of its prompt)
    st.integers(0, 2),  # member of its event
    st.sampled_from(["", "s1", "s2"]),  # the state of a branch alternative's event ("": none)
    UNREPRESENTABLE,
)


def estimator_inputs(rows, value: float | None) -> AdvantageInputs:
    """One row per draw; its event is (prompt, episode, type, sibling), its episode (prompt, episode); the returns
    `value` on every row, else each row's own draw (an episode's team return: its first row's)."""
    rows = list({r[:6]: r for r in reversed(rows)}.values())
    returns = f32([value if value is not None else r[6] for r in rows])
    events = [(p, ep, t, s) for p, t, _, ep, _, s, _ in rows]
    episodes = [(p, ep) for p, _, _, ep, _, _, _ in rows]
    team = dict(reversed(list(zip(episodes, returns))))  # an episode's first row's return
    siblings = [r[5] or None for r in rows]
    keys = [None if ep == 3 else f"cell{ep % 2}" for _, _, _, ep, _, _, _ in rows]  # an event's state key
    return AdvantageInputs(
        torch.tensor(returns),
        torch.tensor([sorted(set(events)).index(e) for e in events]),
        [f"p{r[0]}" for r in rows],
        [f"t{r[1]}" for r in rows],
        [f"a{r[2]}" for r in rows],
        episode_ids=torch.tensor([sorted(set(episodes)).index(e) for e in episodes]),
        episode_returns=torch.tensor([team[e] for e in episodes]),
        siblings=siblings if any(s is not None for s in siblings) else None,
        state_keys=keys,
    )


def reference_estimator(name: str, x: AdvantageInputs) -> list[float]:
    """docs/objective.md §5's table, from the definitions."""
    returns, sib = x.returns.tolist(), x.siblings or [None] * len(x.roles)
    by_type = list(zip(x.prompt_ids, x.event_types, sib))
    if name == "event":
        return reference_events(returns, by_type, x.event_ids.tolist())
    if name == "row":
        return reference_groups(returns, by_type)
    if name == "agent":
        return reference_groups(returns, list(zip(x.prompt_ids, x.roles, sib)))
    episode = reference_events(x.episode_returns.tolist(), list(x.prompt_ids), x.episode_ids.tolist())
    if name == "state":  # GiGPO: the episode's, plus the step's over (prompt, event type, key)
        keyed = list(zip(x.prompt_ids, x.event_types, sib, x.state_keys or [None] * len(sib)))
        return [a + b for a, b in zip(episode, reference_events(returns, keyed, x.event_ids.tolist()))]
    return episode


ESTIMATORS = ["event", "row", "agent", "episode"]  # the built-in objectives' own
ALL_ESTIMATORS = [*ESTIMATORS, "state"]


@pytest.mark.parametrize("name", ALL_ESTIMATORS)
@PROPERTY
@given(rows=st.lists(ROW, min_size=1, max_size=40), value=UNREPRESENTABLE)
def test_every_estimator_gives_equal_returns_zero(name: str, rows, value: float) -> None:
    assert bit_zero(get_advantage_estimator(name)(estimator_inputs(rows, value), EPS))


@pytest.mark.parametrize("name", ALL_ESTIMATORS)
@PROPERTY
@given(rows=st.lists(ROW, min_size=1, max_size=40))
def test_every_estimator_agrees_with_a_float64_reference(name: str, rows) -> None:
    inputs = estimator_inputs(rows, None)
    got = get_advantage_estimator(name)(inputs, EPS)
    np.testing.assert_allclose(got.numpy(), reference_estimator(name, inputs), rtol=0, atol=1e-6)


def test_the_estimators_cover_every_builtin_objective() -> None:
    assert {get_objective(n).advantage for n in OBJECTIVES} == set(ESTIMATORS)


# --- keyed credit per member and per round, through build_rows --------------------------------


def _member(role: str, replica: int, index: int = 0) -> Member:
    return Member(index, role, replica, "lm", 0, [1], [2], [0.0], "x", True)


def _episode(sample: int, value: float, keyed: bool) -> Episode:
    """Two solvers (K = 2), then a judge twice (rounds 1 and 2): every return `value`, keyed per member and
    per round when `keyed`."""
    ep = Episode(f"p/{sample}", "p", sample, {})
    solvers = Event(
        f"p/{sample}/e1",
        "parallel:solver",
        "solve",
        "s",
        2,
        True,
        [_member("solver", 1), _member("solver", 2, 1)],
    )
    judges = [
        Event(f"p/{sample}/e{n}", "loop:judge", "judge", "s", 1, True, [_member("judge", 1)]) for n in (2, 3)
    ]
    ep.events = [solvers, *judges]
    keys = {"solver#1": value, "solver#2": value, "judge@1": value, "judge@2": value} if keyed else {}
    ep.record_returns(value, value, keys)
    return ep


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_a_team_whose_every_episode_scored_the_same_gets_no_advantage(objective: str, keyed: bool) -> None:
    """The issue's case: every episode of a two-agent team scored -0.4 (and 0.7, 0.1): loss and gradient 0."""
    for value in (-0.4, 0.7, 0.1):
        rows = build_rows([_episode(s, value, keyed) for s in range(8)], objective)
        assert len(rows) == 32 and math.isclose(rows.returns[0].item(), value, rel_tol=1e-7)
        assert bit_zero(rows.advantages), (objective, value, rows.advantages)


# --- the update: a team whose every episode scored -0.4 moves no weight -----------------------


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_an_update_on_equal_returns_has_zero_loss_and_gradient(models, dist, objective: str) -> None:
    """The issue's run: loss -0.056, grad norm 0.15-0.36 and moved weights, from rounding alone."""
    from srpo_dsl.rl.loop.update import update
    from tests.support.training import TEMPERATURES, build, make_episodes, parameters

    episodes = make_episodes(mixed=True, group=8)  # eight rollouts per prompt, as in the issue
    for ep in episodes:
        ep.record_returns(-0.4, -0.4, {})
    rows = build_rows(episodes, objective)
    policies, opts = build(dict(zip("ab", models)), dist, objective=objective, old_logprobs="rollout")
    before = parameters(policies)
    stats = update(policies, rows, opts, dist, TEMPERATURES)
    after = parameters(policies)
    assert stats["loss"] == 0.0 and stats["grad_norm"] == 0.0
    assert all(torch.equal(before[k], after[k]) for k in before)
