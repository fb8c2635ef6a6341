"""Event-atomic batching (docs/objective.md §9)."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from srpo_dsl.rl import plan_batches, setwise_loss
from srpo_dsl.rl.objective.batching import balance, drop_incomplete, linked_atoms


def random_rows(seed: int, num_events: int = 60) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    events = [f"e{e}" for e in range(num_events) for _ in range(rng.randint(1, 5))]
    rng.shuffle(events)  # the rows of an event need not be adjacent
    return events, [rng.randint(1, 300) for _ in events]


def check_plan(plan: list[list[list[int]]], events: list, world_size: int, micro_batches: int) -> None:
    assert len(plan) == world_size and all(len(rank) == micro_batches for rank in plan)
    placed = [row for rank in plan for micro in rank for row in micro]
    assert sorted(placed) == list(range(len(events)))  # every row exactly once
    home = {}
    for r, rank in enumerate(plan):
        for m, micro in enumerate(rank):
            for row in micro:
                assert home.setdefault(events[row], (r, m)) == (r, m)  # an event is never split


@pytest.mark.parametrize("world_size, micro_batches", [(1, 1), (1, 4), (2, 2), (4, 3), (8, 1)])
def test_plan_is_event_atomic_and_balanced(world_size: int, micro_batches: int) -> None:
    events, tokens = random_rows(0)
    plan = plan_batches(events, tokens, world_size=world_size, micro_batches=micro_batches)
    check_plan(plan, events, world_size, micro_batches)
    event_tokens: dict[str, int] = {}
    for e, n in zip(events, tokens):
        event_tokens[e] = event_tokens.get(e, 0) + n
    biggest = max(event_tokens.values())
    rank_loads = [sum(tokens[i] for micro in rank for i in micro) for rank in plan]
    # largest-first greedy: no bin exceeds the mean by more than one event
    assert max(rank_loads) <= sum(tokens) / world_size + biggest
    for rank, load in zip(plan, rank_loads):
        assert max(sum(tokens[i] for i in micro) for micro in rank) <= load / micro_batches + biggest
    assert max(rank_loads) - min(rank_loads) <= biggest


def test_plan_is_deterministic() -> None:
    events, tokens = random_rows(1)
    first = plan_batches(events, tokens, world_size=4, micro_batches=2)
    assert first == plan_batches(list(events), list(tokens), world_size=4, micro_batches=2)


def test_plan_hand_example() -> None:
    # events a (10 tokens), b (20), c (3): b -> rank 0, a -> rank 1, c -> rank 1
    plan = plan_batches(["a", "a", "b", "c", "c", "c"], [5, 5, 20, 1, 1, 1], world_size=2, micro_batches=2)
    assert plan == [[[2], []], [[0, 1], [3, 4, 5]]]


def test_fewer_events_than_bins_leaves_empty_bins() -> None:
    plan = plan_batches([0, 0], [4, 4], world_size=2, micro_batches=2)
    assert plan == [[[0, 1], []], [[], []]]


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        plan_batches([0, 1], [1], world_size=1, micro_batches=1)
    with pytest.raises(ValueError):
        plan_batches([0], [1], world_size=0, micro_batches=1)
    with pytest.raises(ValueError):
        plan_batches([0], [-1], world_size=1, micro_batches=1)


@settings(max_examples=100, deadline=None)
@given(
    events=st.lists(st.integers(0, 12), max_size=40),
    world_size=st.integers(1, 4),
    micro_batches=st.integers(1, 4),
    data=st.data(),
)
def test_plan_property(events: list[int], world_size: int, micro_batches: int, data: st.DataObject) -> None:
    tokens = data.draw(st.lists(st.integers(0, 100), min_size=len(events), max_size=len(events)))
    check_plan(
        plan_batches(events, tokens, world_size=world_size, micro_batches=micro_batches),
        events,
        world_size,
        micro_batches,
    )


def test_balance_largest_first() -> None:
    assert balance([5, 4, 3, 3, 3], 2) == [[0, 3], [1, 2, 4]]  # loads 8 and 10


def test_layout_does_not_change_the_update() -> None:
    # the loss summed over ranks x micro-batches, each normalised by the global event count
    events, tokens = random_rows(2, num_events=20)
    ids = {e: i for i, e in enumerate(dict.fromkeys(events))}
    event_ids = torch.tensor([ids[e] for e in events])
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(len(events), 8, generator=g, dtype=torch.float64)
    lp = (old + 0.1 * torch.randn(old.shape, generator=g, dtype=torch.float64)).requires_grad_()
    mask = torch.arange(8)[None, :] < torch.tensor(tokens)[:, None] % 8 + 1
    adv = torch.randn(len(ids), generator=g, dtype=torch.float64)[event_ids]
    full, _ = setwise_loss(lp, old, mask, event_ids, adv)
    (full_grad,) = torch.autograd.grad(full, lp)
    grad = torch.zeros_like(lp)
    for rank in plan_batches(events, tokens, world_size=3, micro_batches=2):
        for micro in rank:
            rows = torch.tensor(micro, dtype=torch.long)
            loss, _ = setwise_loss(
                lp[rows], old[rows], mask[rows], event_ids[rows], adv[rows], num_events=len(ids)
            )
            grad += torch.autograd.grad(loss, lp)[0]
    torch.testing.assert_close(grad, full_grad, atol=1e-12, rtol=0)


def test_drop_incomplete() -> None:
    events = ["a", "a", "a", "b", "b", "c", "d", "d", "e"]
    cardinality = [3, 3, 3, 3, 3, 1, 2, 1, 1]  # b misses a member; d disagrees on K
    kept, dropped = drop_incomplete(events, cardinality)
    assert kept == [0, 1, 2, 5, 8] and dropped == 2


def test_drop_incomplete_checks_member_indices() -> None:
    events = ["a", "a", "b", "b", "c"]
    cardinality = [2, 2, 2, 2, 1]
    members = [0, 1, 0, 0, 0]  # b has member 0 twice and misses member 1
    assert drop_incomplete(events, cardinality, members) == ([0, 1, 4], 1)
    assert drop_incomplete(events, cardinality) == ([0, 1, 2, 3, 4], 0)
    with pytest.raises(ValueError):
        drop_incomplete(events, cardinality[:2])


def test_linked_rows_merge_their_atoms() -> None:
    """Rows linked by `follows` (a conversation's turns) put their atoms in one, transitively; the merged
    atom keeps its smallest id; unlinked atoms stay apart."""
    atoms = [5, 5, 3, 4, 1, 2, 0]
    follows = [-1, -1, 0, -1, 2, -1, 3]  # row 2 continues row 0 (5 + 3), row 4 row 2 (+ 1), row 6 row 3
    assert linked_atoms(atoms, follows) == [1, 1, 1, 0, 1, 2, 0]
    assert linked_atoms(atoms, [-1] * 7) == atoms


def test_budget_batches_fill_whole_events_to_the_padded_token_budget() -> None:
    from srpo_dsl.rl.objective.batching import budget_batches

    # events: A rows 0,1 (10, 30 tokens: 2 x 30 = 60 padded), B rows 2 (50), C rows 3,4 (20, 20: 40), D row 5 (5)
    events = ["A", "A", "B", "C", "C", "D"]
    tokens = [10, 30, 50, 20, 20, 5]
    # largest first: A (60), B (50), C (40), D (5). Budget 100: A opens bin 0; B would make 3 x 50 = 150:
    # bin 1; C into bin 0 would be 4 x 30 = 120, into bin 1 3 x 50 = 150: bin 2; D: 3 x 30 = 90 <= 100
    assert budget_batches(events, tokens, 100) == [[0, 1, 5], [2], [3, 4]]
    assert budget_batches(events, tokens, 10_000) == [[0, 1, 2, 3, 4, 5]]
    assert budget_batches(events, tokens, 1) == [[0, 1], [2], [3, 4], [5]]  # each event alone, never split
    assert budget_batches([], [], 8) == [[]]
    # packed rows count their sum: A 40, B 50, C 40, D 5; budget 90: A + B = 90, then C + D = 45
    assert budget_batches(events, tokens, 90, padded=False) == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="budget must be >= 1"):
        budget_batches(events, tokens, 0)


def test_a_token_budget_and_a_micro_batch_count_are_one_choice() -> None:
    from pydantic import ValidationError

    from srpo_dsl.lang.checks.schema import TrainOptions

    assert TrainOptions(max_tokens_per_micro_batch=4096).micro_batches == 1
    with pytest.raises(ValidationError, match="set micro_batches or max_tokens_per_micro_batch, not both"):
        TrainOptions(micro_batches=2, max_tokens_per_micro_batch=4096)
