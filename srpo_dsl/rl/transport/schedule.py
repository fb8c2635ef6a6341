"""Which rollout worker generates which step, from which version on; a lost worker's steps go to the others.

    lag      = min(S, R)                        # S = max_staleness, R = rollout_workers
    target t = max(start, t - 1 - lag)          # the oldest version step t's batch may begin with
    owner  t = workers[(t - 1) mod R]           # round robin; a lost worker's steps: the others in turn

Trainer rank 0 keeps the schedule. The trainer about to take step t holds version t - 1, so a batch
begun with the target is at most lag <= S versions behind when it is trained on, and a worker only
ever moves to newer versions during a step. After the trainer makes version v, v goes to the
workers that may use it (`due`), as `rollout_weights` says:

  newest     every worker with a step not trained yet gets every version: it begins each step with
             the newest it holds (waiting for the target when it holds none that new) and takes each
             newer one before its next generation call (`fresh.py`). Fresher batches; which version
             a call uses depends on the timing, so only S = 0 is bit-reproducible.
  scheduled  a worker gets exactly the versions its steps' targets name, and each batch is generated
             with its target alone: every batch of a run without faults is generated with its target
             version, whatever the timing, and the run is as reproducible as a synchronous one.

Either way a version newer than t - 1 - R cannot exist when step t begins (its worker has just sent
step t - R), so an S larger than R changes nothing.

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
    newest: bool = False  # `rollout_weights = newest`: every version to every worker with steps left

    @classmethod
    def plan(
        cls,
        workers: Sequence[int],
        max_staleness: int,
        start: int,
        last: int,
        held: Collection[int],
        newest: bool = False,
    ) -> Schedule:
        """Round robin over `workers` of the steps after `start` not `held`."""
        todo = [t for t in range(start + 1, last + 1) if t not in held]
        owner = {t: workers[(t - 1) % len(workers)] for t in todo}
        return cls(list(workers), lag(max_staleness, len(workers)), start, last, owner, start, newest=newest)

    def target(self, step: int) -> int:
        return max(self.start, step - 1 - self.lag)

    def orders(self, worker: int) -> list[Order]:
        """The steps `worker` owns and that are not trained yet, in order, each with its target."""
        steps = sorted(t for t, w in self.owner.items() if w == worker and t > self.consumed)
        return [(t, self.target(t)) for t in steps]

    def due(self, version: int) -> list[int]:
        """The workers that need `version` now. Recorded as sent. `newest`: those with a step not trained
        yet that were sent nothing as new; else those with a step not trained yet whose target is newer
        than anything they were sent and not newer than `version`."""
        if self.newest:
            left = {w for t, w in self.owner.items() if t > self.consumed}
            out = [w for w in self.workers if w in left and self.sent.get(w, -1) < version]
        else:
            out = self.targeted(version)
        for w in out:
            self.sent[w] = version
        return out

    def targeted(self, version: int) -> list[int]:
        """(`scheduled`) The workers one of whose steps not trained yet has a target newer than anything
        they were sent and not newer than `version`, in step order."""
        window = range(self.consumed + 1, min(self.last, version + 1 + self.lag) + 1)
        out: list[int] = []
        for t in window:
            w = self.owner.get(t)
            if w is not None and self.sent.get(w, -1) < self.target(t) <= version and w not in out:
                out.append(w)
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
