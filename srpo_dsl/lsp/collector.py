"""The server's cycle collector: run when the user pauses, not in the middle of a request.

The server keeps each open workflow's syntax tree and graph (hundreds of thousands of objects for a
5,000-line workflow), and a full collection walks them all: as long as a request takes. Left
automatic, it comes every few edits, in whichever request happens to allocate then (symbols once
took 140 ms instead of 75). The server turns it off; reference counting still frees everything but
reference cycles at once, and those are collected `IDLE` seconds after the last analysis, or at
once after `MOST` analyses without a pause (continuous typing).
"""

from __future__ import annotations

import asyncio
import gc

IDLE = 1.0
MOST = 100


class IdleCollector:
    """`analysed()` after each analysis; `start()` once, in the server's process."""

    def __init__(self, idle: float = IDLE, most: int = MOST):
        self.idle, self.most = idle, most
        self.timer: asyncio.TimerHandle | None = None
        self.pending = 0

    def start(self) -> None:
        gc.disable()

    def analysed(self) -> None:
        """Collect once no analysis has run for `idle` seconds, or now after `most` of them."""
        if self.timer is not None:
            self.timer.cancel()
        self.pending += 1
        if self.pending >= self.most:
            self.collect()
        else:
            self.timer = asyncio.get_running_loop().call_later(self.idle, self.collect)

    def collect(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.pending = None, 0
        gc.collect()
