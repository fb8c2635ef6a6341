"""The rollout workers' schedule (which worker generates which step with which version, a lost worker's
steps) and a worker's inbox (orders smallest step first, the oldest version new enough), by hand."""

from __future__ import annotations

import random
import threading

import pytest

from srpo_dsl.rl.transport.inbox import Inbox, Order
from srpo_dsl.rl.transport.link import LinkError, Orders, Stop
from srpo_dsl.rl.transport.remote_weights import Header, Weights
from srpo_dsl.rl.transport.schedule import Schedule, lag


def test_the_lag_is_the_bound_or_the_workers_whichever_is_smaller() -> None:
    assert [lag(s, 1) for s in (0, 1, 2, 5)] == [0, 1, 1, 1]
    assert [lag(s, 3) for s in (0, 2, 3, 7)] == [0, 2, 3, 3]


def test_one_worker_one_step_behind_gets_each_version_its_next_step_needs() -> None:
    s = Schedule.plan([1], max_staleness=1, start=0, last=4, held=())
    assert s.orders(1) == [(1, 0), (2, 0), (3, 1), (4, 2)]  # t - 2, never below the start
    assert s.due(0) == [1] and s.due(0) == []  # sent once
    s.consumed = 1
    assert s.due(1) == [1]  # step 3's version
    s.consumed = 2
    assert s.due(2) == [1]  # step 4's
    s.consumed = 3
    assert s.due(3) == []  # no step left needs it


def test_two_workers_two_behind_take_steps_in_turn() -> None:
    s = Schedule.plan([1, 2], max_staleness=5, start=0, last=6, held=())
    assert s.lag == 2
    assert s.orders(1) == [(1, 0), (3, 0), (5, 2)] and s.orders(2) == [(2, 0), (4, 1), (6, 3)]
    assert s.due(0) == [1, 2]
    s.consumed = 1
    assert s.due(1) == [2]
    s.consumed = 2
    assert s.due(2) == [1]


def test_a_resumed_run_generates_only_what_it_does_not_hold_from_the_start_version() -> None:
    s = Schedule.plan([1], max_staleness=1, start=4, last=7, held={5})
    assert s.orders(1) == [(6, 4), (7, 5)]
    assert s.due(4) == [1]


def test_a_lost_workers_steps_go_to_the_others_with_the_trainers_weights() -> None:
    """Three workers, one step behind; worker 2 dies generating step 5 while the trainer holds version 4.
    Worker 1 last got version 2 (for step 4): it needs the trainer's version 4 now, or both would wait."""
    s = Schedule.plan([1, 2, 3], max_staleness=1, start=0, last=9, held=())
    for version in range(4):
        s.consumed = version
        s.due(version)
    s.consumed = 4
    assert s.due(4) == [3]  # step 6's version
    assert s.lose(2) == {1: [(5, 3)], 3: [(8, 6)]}  # its steps not trained yet, round robin
    assert s.owner[5] == 1 and s.owner[8] == 3 and s.workers == [1, 3]
    assert s.due(4) == [1]  # step 5 on worker 1, which holds nothing new enough
    assert s.lose(2) == {}  # told twice: nothing more to do
    s.lose(1)
    assert s.lose(3) == {} and s.workers == []


def weights(version: int) -> Weights:
    return Weights(Header(version, {}, {}, {}, {}), {})


def test_an_inbox_gives_the_smallest_step_first_then_stops() -> None:
    inbox = Inbox(link=None)
    inbox.take(weights(1).header)
    inbox.take(Orders([(3, 1), (5, 3)]))
    inbox.take(Orders([(2, 0)]))  # a lost worker's step, ordered later
    assert inbox.next_step() == (Order(2, 0), weights(1))
    assert inbox.next_step() == (Order(3, 1), None)  # version 1 is loaded
    inbox.take(Stop())
    assert inbox.next_step() is None


def test_an_inbox_waiting_for_a_later_steps_version_takes_an_earlier_step_ordered_meanwhile() -> None:
    """Worker 1 waits for step 5's version 3 while the trainer waits for step 4 from a worker that died:
    step 4, handed to worker 1, comes first (taking step 5 first deadlocked the run: the trainer makes
    version 3 only from step 4's batch)."""
    inbox = Inbox(link=None)
    inbox.take(weights(1).header)
    inbox.take(Orders([(3, 1), (5, 3)]))
    assert inbox.next_step() == (Order(3, 1), weights(1))
    taken = []
    waiting = threading.Thread(target=lambda: taken.append(inbox.next_step()))
    waiting.start()
    waiting.join(timeout=0.2)
    assert waiting.is_alive()  # step 5's version is not there yet
    inbox.take(Orders([(4, 2)]))  # the lost worker's step, with the version held: version 1 will not do
    waiting.join(timeout=0.2)
    assert waiting.is_alive()
    inbox.take(weights(2).header)
    waiting.join(timeout=5)
    assert taken == [(Order(4, 2), weights(2))]
    inbox.take(weights(3).header)
    assert inbox.next_step() == (Order(5, 3), weights(3))


def test_an_inbox_takes_the_oldest_version_new_enough_and_drops_the_older() -> None:
    inbox = Inbox(link=None)
    for v in (0, 1, 2):
        inbox.take(weights(v).header)
    inbox.take(Orders([(2, 1), (3, 1), (4, 0), (6, 3), (5, 2)]))
    assert inbox.next_step() == (Order(2, 1), weights(1)) and inbox.loaded == 1
    assert inbox.next_step() == (Order(3, 1), None)  # the loaded one will do
    assert inbox.next_step() == (Order(4, 0), None)
    assert [w.version for w in inbox.versions] == [2]
    inbox.error = LinkError("trainer rank 0 stopped (Connection closed by peer)")
    assert inbox.next_step() == (Order(5, 2), weights(2))  # what arrived before the trainer went away
    with pytest.raises(LinkError, match="trainer rank 0 stopped"):
        inbox.next_step()  # step 6's version 3 never came


# --- newest weights: a whole run of the schedule and the inboxes, interleaved at random ----------------

CALLS = 3  # generation calls per step (executor rounds)


def simulate(staleness: int, workers: int, newest: bool, seed: int, steps: int = 12) -> dict[int, list[int]]:
    """Trainer rank 0's schedule and each worker's inbox, in one thread: at each turn one of them, drawn
    at random, does its next thing (the trainer takes the next batch and makes a version; a worker begins
    its next step or makes its next generation call, taking the newest version with `newest`). Asserts at
    every call that its version is at most S behind the version the trainer will hold when it takes the
    step; returns each step's versions, call by call."""
    rng = random.Random(seed)
    ranks = list(range(1, workers + 1))
    schedule = Schedule.plan(ranks, staleness, start=0, last=steps, held=(), newest=newest)
    inboxes = {w: Inbox(link=None, newest=newest) for w in ranks}
    for w in ranks:
        inboxes[w].take(Orders(schedule.orders(w)))

    def publish(version: int) -> None:
        for w in schedule.due(version):
            inboxes[w].keep(weights(version))

    publish(0)
    batches: dict[int, list[int]] = {}
    running: dict[int, tuple[int, list[int]]] = {}  # worker -> (step, versions of its calls so far)
    while schedule.consumed < steps:
        turns = [0] if schedule.consumed + 1 in batches else []
        turns += [w for w in ranks if w in running or inboxes[w].servable()]
        assert turns, "the run is stuck"
        who = rng.choice(turns)
        if who == 0:  # the trainer takes step t, holding version t - 1, and makes version t
            step = schedule.consumed + 1
            assert step - 1 - min(batches[step]) <= staleness
            schedule.consumed = step
            if step < steps:
                publish(step)
        elif who not in running:
            order, _ = inboxes[who].next_step()
            running[who] = (order.step, [])
        else:
            step, calls = running[who]
            if newest:
                inboxes[who].latest()
            calls.append(inboxes[who].loaded)
            assert calls[-1] >= step - 1 - staleness  # never older than S at any call
            if len(calls) == CALLS:
                batches[step] = calls
                del running[who]
    return batches


@pytest.mark.parametrize("staleness, workers", [(0, 1), (0, 2), (1, 1), (1, 2), (2, 2), (2, 3), (3, 2)])
def test_newest_weights_stay_within_the_bound_and_sometimes_change_mid_step(staleness, workers) -> None:
    spans = []
    for seed in range(8):
        batches = simulate(staleness, workers, newest=True, seed=seed)
        for step, calls in batches.items():
            assert calls == sorted(calls)  # versions only grow during a step
            assert calls[0] >= max(0, step - 1 - min(staleness, workers))  # begun with its target or newer
            if staleness == 0:
                assert calls == [step - 1] * CALLS  # synchronous: the trainer's version, whatever the timing
        spans += [len(set(calls)) for calls in batches.values()]
    if staleness > 0:
        assert max(spans) > 1  # some step took a version made while it was generating


@pytest.mark.parametrize("staleness, workers", [(0, 1), (1, 1), (2, 2), (3, 2)])
def test_scheduled_weights_are_each_steps_target_whatever_the_timing(staleness, workers) -> None:
    for seed in range(4):
        batches = simulate(staleness, workers, newest=False, seed=seed)
        assert batches == {t: [max(0, t - 1 - min(staleness, workers))] * CALLS for t in batches}


def test_newest_sends_every_version_to_every_worker_with_steps_left() -> None:
    s = Schedule.plan([1, 2], max_staleness=2, start=0, last=4, held=(), newest=True)
    assert s.due(0) == [1, 2] and s.due(0) == []
    s.consumed = 1
    assert s.due(1) == [1, 2]  # step 3's worker and step 4's, though step 4's target is version 1
    s.consumed = 3
    assert s.due(3) == [2]  # worker 1 has no step left


def test_a_newest_inbox_keeps_only_the_newest_version_and_hands_newer_ones_mid_step() -> None:
    inbox = Inbox(link=None, newest=True)
    for v in (0, 1):
        inbox.keep(weights(v))
    assert [w.version for w in inbox.versions] == [1]  # version 0 will never be loaded
    inbox.take(Orders([(3, 0), (4, 1)]))
    assert inbox.next_step() == (Order(3, 0), weights(1))  # the newest, not the oldest new enough
    assert inbox.latest() is None  # nothing newer yet
    inbox.keep(weights(2))
    assert inbox.latest() == weights(2) and inbox.loaded == 2
    assert inbox.next_step() == (Order(4, 1), None)  # version 2 is loaded already
