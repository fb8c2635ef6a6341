"""The trainer's side of asynchronous rollouts: batches in, orders and weights out, lost workers.

    feed.begin(policies, start, held)      # agree on the batches held (a checkpoint's); rank 0 orders
                                           # every step and sends the weights the first steps need
    episodes, metrics = feed.batch(step)   # this rank's share of the step (waits); NoWorkerLeft
    ... update ...
    feed.publish(policies, step)           # version `step` to the workers whose steps need it
    feed.held_after(step)                  # at a checkpoint: later steps' batches (waits for the next lag)
    feed.close()                           # the run is over: the workers stop

Every trainer rank listens to every worker on a thread of its own and keeps the first copy of each
step's share it receives: nothing received is dropped for a copy generated later. A worker that
goes away (its process died, its node is gone) closes its connections; every rank notices, and
trainer rank 0, which keeps the schedule (`schedule.py`), hands its steps not yet trained
to the others, with the newest weights when they need them. The ranks agree before each step that
each holds its share: when one does not and no worker is left, all stop together (NoWorkerLeft).

The metrics of a step, under `async/`: the staleness of its kept episodes (mean, max), the
versions per kept episode (mean: above 1 when episodes span weight updates), the episodes dropped,
and the workers still running; under `time/` (wall-clock, as every timing): the
seconds the worker and the trainer waited for each other (`worker_idle`, `trainer_idle`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress

import torch

from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.progress import write
from srpo_dsl.rl.distributed.process_group import all_gather, all_reduce
from srpo_dsl.rl.engines.policies import TrainingPolicy
from srpo_dsl.rl.transport.link import CONTROL, EPISODES, SETUP, Link, LinkError, Orders, RolloutBatch, Stop
from srpo_dsl.rl.transport.remote_weights import Weights, build_weights, send_weights
from srpo_dsl.rl.transport.schedule import Schedule, lag
from srpo_dsl.rl.transport.staleness import within_bound
from srpo_dsl.runtime.episode import Episode

PREFIX = "async/"


class NoWorkerLeft(LinkError):
    """Every rollout worker went away before a step's batch reached every trainer rank."""


class Feed:
    """The trainer rank's end of the link to the rollout workers."""

    def __init__(
        self, link: Link, opts: TrainOptions, policies: Mapping[str, TrainingPolicy], device: torch.device
    ):
        self.link, self.opts, self.device = link, opts, device
        self.trained = {name for name, p in policies.items() if p.engine is not None}
        self.lag = lag(opts.max_staleness, opts.rollout_workers)
        self.ready = threading.Condition(threading.RLock())  # re-entered: a loss found while sending
        self.batches: dict[int, RolloutBatch] = {}  # step -> this rank's share, received and not taken
        self.alive = set(range(link.layout.trainers, link.layout.world))
        self.lost: list[str] = []  # why each worker went away
        self.taken = 0  # the last step taken
        self.schedule: Schedule | None = None  # trainer rank 0's
        self.current: Weights | None = None  # trainer rank 0's newest version
        self.closing = False

    def begin(self, policies: Mapping[str, TrainingPolicy], start: int, held: Sequence[RolloutBatch]) -> None:
        """Before the first step (`start` steps done): this rank's held batches, the listeners, the
        orders, and the weights the first steps need."""
        self.taken = start
        self.batches = {b.step: b for b in held if b.step > start}
        common = set.intersection(*(set(steps) for steps in all_gather(sorted(self.batches))))
        for worker in sorted(self.alive):
            listener = threading.Thread(target=self.listen, args=(worker,), name="srpo-feed", daemon=True)
            self.link.read(listener)
        weights = build_weights(policies, start, self.link.device)
        if self.link.layout.rank != 0:
            return
        with self.ready:
            workers = sorted(self.alive)
            newest, opts = self.opts.rollout_weights == "newest", self.opts
            self.schedule = Schedule.plan(workers, opts.max_staleness, start, opts.steps, common, newest)
            for worker in workers:
                orders = Orders(self.schedule.orders(worker))
                self.reach(worker, lambda w=worker, o=orders: self.link.send_object(o, w, CONTROL))
            self.send_due(weights)

    def batch(self, step: int) -> tuple[list[Episode], dict[str, float]]:
        """This rank's share of `step`'s batch, within the staleness bound, and its metrics."""
        clock = time.perf_counter()
        with self.ready:
            self.ready.wait_for(lambda: step in self.batches or not self.alive)
            have = step in self.batches
        if all_reduce([float(have)], self.device)[0] < self.link.layout.trainers:
            raise NoWorkerLeft(f"{'; '.join(self.lost)}: no rollout worker is left")
        with self.ready:
            batch, self.taken = self.batches.pop(step), step
            if self.schedule is not None:
                self.schedule.consumed = step
            alive = len(self.alive)
        waited = time.perf_counter() - clock
        fresh = within_bound(batch.episodes, step - 1, self.opts.max_staleness, self.trained)
        metrics = fresh.metrics() | {"workers": alive}
        metrics["dropped_episodes"] = all_reduce([fresh.dropped], self.device)[0]  # over the trainer ranks
        clocks = {"time/worker_idle": batch.idle, "time/trainer_idle": waited}  # wall-clock keys: time/
        return fresh.episodes, {PREFIX + k: v for k, v in metrics.items()} | clocks

    def publish(self, policies: Mapping[str, TrainingPolicy], version: int) -> None:
        """After the optimizer step that made `version`: the workers whose steps need it get it, unless no
        batch is left to generate (collective over the trainer ranks under ZeRO-3)."""
        if version >= self.opts.steps:
            return
        weights = build_weights(policies, version, self.link.device)
        if self.link.layout.rank != 0:
            return
        with self.ready:  # the listeners change `alive`
            workers = sorted(self.alive)
        for worker in workers:  # the previous version was taken: one version's buffers at a time
            try:
                self.link.flush([worker])
            except LinkError as exc:
                self.lose(worker, exc)
        with self.ready:
            self.send_due(weights)

    def held_after(self, step: int) -> list[RolloutBatch]:
        """This rank's batches of the steps after `step`, once it holds the next `lag` ones: generated
        with weights older than `step`'s, a resumed run could not generate them again."""
        upto = min(step + self.lag, self.opts.steps)
        with self.ready:
            self.ready.wait_for(
                lambda: all(t in self.batches for t in range(step + 1, upto + 1)) or not self.alive
            )
            return [self.batches[t] for t in sorted(self.batches) if t > step]

    def close(self) -> None:
        """The run is over: every worker still running stops."""
        with self.ready:
            self.closing = True
            workers = sorted(self.alive)
            for worker in workers if self.link.layout.rank == 0 else ():
                with suppress(LinkError):  # it went away after its last batch: nothing is lost
                    self.link.send_object(Stop(), worker, CONTROL)
        for worker in workers:
            with suppress(LinkError):  # it went away after its last batch: nothing is lost
                self.link.flush([worker])

    def listen(self, worker: int) -> None:
        """A thread: every share `worker` sends, until it goes away."""
        try:
            while True:
                batch = self.link.recv_object(worker, EPISODES)
                if not isinstance(batch, RolloutBatch):
                    raise LinkError(
                        f"{self.link.describe(worker)} sent a {type(batch).__name__}, not episodes"
                    )
                with self.ready:
                    if batch.step > self.taken:
                        self.batches.setdefault(batch.step, batch)  # the first copy received is kept
                    self.ready.notify_all()
        except LinkError as exc:
            self.lose(worker, exc)

    def lose(self, worker: int, exc: LinkError) -> None:
        """`worker` went away: it is forgotten, and on trainer rank 0 its steps go to the others (a warning
        line, written once the lock is released: a slow stderr never holds up the listeners)."""
        with self.ready:
            if self.closing or self.link.closed or worker not in self.alive:
                return
            self.alive.discard(worker)
            self.link.forget(worker)
            self.lost.append(str(exc))
            if self.schedule is not None:
                self.reassign(worker)
            self.ready.notify_all()
            left = len(self.alive) if self.schedule is not None else 0
        if left:
            write(f"warning: {exc}: its steps go to the {left} worker{'s' if left > 1 else ''} left")

    def reassign(self, worker: int) -> None:
        """Trainer rank 0 (holding the lock): the lost worker's steps not yet trained to the others."""
        assert self.schedule is not None
        orders = self.schedule.lose(worker)
        for other, steps in orders.items():
            self.reach(other, lambda o=other, s=steps: self.link.send_object(Orders(s), o, CONTROL))
        if self.current is not None:
            self.send_due(self.current)

    def reach(self, worker: int, send: Callable[[], None]) -> None:
        """Trainer rank 0 (holding the lock): `send()` to `worker`, unless it is gone; one whose connection
        is found broken here is lost as its listener would find it (its steps go to the others)."""
        if worker not in self.alive:
            return
        try:
            send()
        except LinkError as exc:
            self.lose(worker, exc)

    def send_due(self, weights: Weights) -> None:
        """Trainer rank 0 (holding the lock): `weights` becomes the newest version, sent to the workers
        whose steps need it now."""
        assert self.schedule is not None
        self.current = weights
        for worker in self.schedule.due(weights.version):
            self.reach(worker, lambda w=worker: send_weights(self.link, weights, w))


def send_setup(link: Link, paths: Mapping[str, str]) -> None:
    """Trainer rank 0 tells every worker each policy's model, as the trainer resolved it."""
    if link.layout.rank == 0:
        for worker in range(link.layout.trainers, link.layout.world):
            link.send_object(dict(paths), worker, SETUP)
