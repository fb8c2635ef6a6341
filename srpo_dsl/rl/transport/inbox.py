"""A rollout worker's thread on its control stream from trainer rank 0: orders, weights, stop.

    inbox = Inbox(link); link.read(inbox)
    while (order := inbox.next_order()) is not None:      # the smallest step ordered (None: stop)
        weights = inbox.weights_for(order.at_least)       # the oldest version held that is new enough
        ...

Messages never wait for a generation to end. Versions arrive in the order they were made; the
worker keeps the one it loaded and those after it, and takes for each step the oldest version
that is at least the step's target (`rollout_schedule.py`): in a run without faults exactly the
target, whatever the timing.
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

    def __init__(self, link: Link):
        super().__init__(name="srpo-inbox", daemon=True)
        self.link = link
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
        weights = recv_flats(self.link, message) if isinstance(message, Header) else None
        with self.ready:
            if isinstance(message, Orders):
                for step, at_least in message.steps:
                    heapq.heappush(self.todo, Order(step, at_least))
            elif weights is not None:
                self.versions.append(weights)
            elif isinstance(message, Stop):
                self.stopped = True
            self.ready.notify_all()

    def next_order(self) -> Order | None:
        """The smallest step ordered and not generated yet (waits for one); None once stopped."""
        with self.ready:
            self.ready.wait_for(lambda: self.todo or self.stopped or self.error)
            if self.stopped:
                return None
            if self.error is not None and not self.todo:
                raise self.error
            return heapq.heappop(self.todo)

    def weights_for(self, at_least: int) -> Weights | None:
        """The oldest version held that is at least `at_least`, to load (waits for it); None when the
        loaded one is. Older versions are dropped."""
        with self.ready:
            if self.loaded >= at_least:
                return None
            self.ready.wait_for(lambda: self.newest() >= at_least or self.error is not None)
            if self.newest() < at_least:
                raise self.error  # type: ignore[misc]
            while self.versions[0].version < at_least:
                self.versions.popleft()
            weights = self.versions.popleft()
            self.loaded = weights.version
            return weights

    def newest(self) -> int:
        return self.versions[-1].version if self.versions else self.loaded
