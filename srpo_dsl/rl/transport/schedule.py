"""Which rollout worker generates which step, with which weights; a lost worker's steps go to the others.

    lag      = min(S, R)                        # S = max_staleness, R = rollout_workers
    target t = max(start, t - 1 - lag)          # the version step t's batch is generated with
    owner  t = workers[(t - 1) mod R]           # round robin; a lost worker's steps: the others in turn

Trainer rank 0 keeps the schedule. After it makes version v, v goes to the workers whose next steps
need it (`due`), so a worker holds exactly the versions its steps are generated with: every batch of
a run without faults is generated with its target version, whatever the timing, and a run is as
reproducible as a synchronous one. Waiting for the newest weights instead would not make batches
fresher: the worker of step t has just sent step t - R, so the trainer holds at most version
t - 1 - R when step t starts, and the lag min(S, R) is always reached; a larger S only gave
timing a say in which version was used.

Steps already received (held by every trainer rank, from a checkpoint) are not generated again.
A lost worker's steps not yet trained go round robin to the workers left, each with the version
the trainer holds when it learns of the loss (within S: the trainer about to take step t holds
t - 1 at most).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

Order = tuple[int, int]  # (step, the oldest version its batch may be generated with)


def lag(max_staleness: int, workers: int) -> int:
    """How many versions behind the trainer a batch is generated: min(S, R)."""
    return min(max_staleness, workers)


@dataclass
class Schedule:
    """The steps still to generate, their owners, and the newest version each worker was sent."""

    workers: list[int]  # global ranks of the workers still running
    lag: int
    start: int  # the steps trained when the run (re)started: the oldest version there is
    last: int
    owner: dict[int, int]  # step -> worker, for every step not held
    consumed: int = 0  # the last step trained
    sent: dict[int, int] = field(default_factory=dict)  # worker -> newest version sent

    @classmethod
    def plan(cls, workers: Sequence[int], max_staleness: int, start: int, last: int, held: Collection[int]):
        """Round robin over `workers` of the steps after `start` not `held`."""
        todo = [t for t in range(start + 1, last + 1) if t not in held]
        owner = {t: workers[(t - 1) % len(workers)] for t in todo}
        return cls(list(workers), lag(max_staleness, len(workers)), start, last, owner, start)

    def target(self, step: int) -> int:
        return max(self.start, step - 1 - self.lag)

    def orders(self, worker: int) -> list[Order]:
        """The steps `worker` owns and that are not trained yet, in order, each with its target."""
        steps = sorted(t for t, w in self.owner.items() if w == worker and t > self.consumed)
        return [(t, self.target(t)) for t in steps]

    def due(self, version: int) -> list[int]:
        """The workers that need `version` now: one of their steps not trained yet has a target newer
        than anything they were sent and not newer than `version`. Recorded as sent."""
        window = range(self.consumed + 1, min(self.last, version + 1 + self.lag) + 1)
        out = []
        for t in window:
            w = self.owner.get(t)
            if w is not None and self.sent.get(w, -1) < self.target(t) <= version and w not in out:
                out.append(w)
        for w in out:
            self.sent[w] = version
        return out

    def lose(self, worker: int) -> dict[int, list[Order]]:
        """`worker` stopped: its steps not trained yet go round robin to the others. The new orders per
        worker ({} when none is left, or `worker` was already lost)."""
        if worker not in self.workers:
            return {}
        self.workers.remove(worker)
        mine = sorted(t for t, w in self.owner.items() if w == worker and t > self.consumed)
        if not self.workers:
            return {}
        new: dict[int, list[Order]] = {}
        for i, t in enumerate(mine):
            self.owner[t] = self.workers[i % len(self.workers)]
            new.setdefault(self.owner[t], []).append((t, self.target(t)))
        return new
