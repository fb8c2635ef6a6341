"""A rollout worker's thread on its control stream from trainer rank 0: orders, weights, stop.

    inbox = Inbox(link, newest); link.read(inbox)
    while (taken := inbox.next_step()) is not None:    # None: stop
        order, weights = taken                         # the smallest step ordered, once a version new
        ...                                            # enough for it is held (None: the loaded one is)
        inbox.latest()                                 # newest: a version received since, or None

Messages never wait for a generation to end. Versions arrive in the order they were made; the
worker takes for each step a version that is at least the step's target (`schedule.py`):
`scheduled`, the oldest such version it holds (it keeps the one it loaded and those after it): in
a run without faults exactly the target, whatever the timing; `newest` (`rollout_weights`), the
newest it holds (it keeps only that one), and during the step every newer one as it arrives
(`latest`, before each generation call: `fresh.py`). A step is taken only once its version is
held: while the worker waits for a later step's version, a lost worker's earlier step may be
ordered, and it comes first (the trainer cannot make that version without it).
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from typing import NamedTuple

from srpo_dsl.rl.transport.link import CONTROL, Link, LinkError, Orders, Stop
from srpo_dsl.rl.transport.remote_weights import Header, Weights, recv_flats


class Order(NamedTuple):
    step: int
    at_least: int  # the oldest version the step's batch may be generated with


class Inbox(threading.Thread):
    """What trainer rank 0 sent this worker and it has not used yet."""

    def __init__(self, link: Link, newest: bool = False):
        super().__init__(name="srpo-inbox", daemon=True)
        self.link, self.newest_only = link, newest
        self.ready = threading.Condition()
        self.todo: list[Order] = []  # a heap: the smallest step first
        self.versions: deque[Weights] = deque()  # received, not loaded, oldest first
        self.loaded = -1
        self.stopped = False
        self.error: LinkError | None = None

    def run(self) -> None:
        try:
            while not self.stopped:
                self.take(self.link.recv_object(0, CONTROL))
        except LinkError as exc:
            with self.ready:
                self.error = exc
                self.ready.notify_all()

    def take(self, message: object) -> None:
        """One message of the control stream (a version's tensors are received here too)."""
        if isinstance(message, Header):
            self.keep(recv_flats(self.link, message))
            return
        with self.ready:
            if isinstance(message, Orders):
                for step, at_least in message.steps:
                    heapq.heappush(self.todo, Order(step, at_least))
            elif isinstance(message, Stop):
                self.stopped = True
            self.ready.notify_all()

    def keep(self, weights: Weights) -> None:
        """A version received (the newest so far): held until a step or a generation call takes it."""
        with self.ready:
            if self.newest_only:  # an older version held is never loaded now: its memory goes
                self.versions.clear()
            self.versions.append(weights)
            self.ready.notify_all()

    def next_step(self) -> tuple[Order, Weights | None] | None:
        """The smallest step ordered and not generated yet, once a version new enough for it is held
        (waits), and the version to load (None: the loaded one will do); None once stopped."""
        with self.ready:
            self.ready.wait_for(lambda: self.stopped or self.error is not None or self.servable())
            if self.stopped:
                return None
            if not self.servable():
                raise self.error  # type: ignore[misc]
            order = heapq.heappop(self.todo)
            return order, self.version_for(order.at_least)

    def servable(self) -> bool:
        """The smallest step ordered can be generated with what is held."""
        return bool(self.todo) and self.newest() >= self.todo[0].at_least

    def version_for(self, at_least: int) -> Weights | None:
        """(Holding the lock, one new enough held.) The oldest version held that is at least `at_least`
        (`newest`: the newest held), to load; None when the loaded one will do. Older versions are dropped."""
        if self.newest_only:
            return self.take_newest()
        if self.loaded >= at_least:
            return None
        while self.versions[0].version < at_least:
            self.versions.popleft()
        weights = self.versions.popleft()
        self.loaded = weights.version
        return weights

    def latest(self) -> Weights | None:
        """The newest version received and not loaded yet, to load now (older ones dropped); None when the
        loaded one is the newest. Does not wait."""
        with self.ready:
            return self.take_newest()

    def take_newest(self) -> Weights | None:
        """(Holding the lock.) `latest`."""
        if not self.versions:
            return None
        weights = self.versions[-1]
        self.versions.clear()
        self.loaded = weights.version
        return weights

    def newest(self) -> int:
        return self.versions[-1].version if self.versions else self.loaded
