"""Signals that stop a command, told from what the user's own code raises.

SIGTERM (`kill`, a batch system's time limit) and SIGHUP (the terminal closed) stop `train` as Ctrl-C
does: `stopping_on_signals` makes each raise `Stopped`, a `KeyboardInterrupt`, where the process is,
so the same clean-up runs (the run's files closed, the folder's lock removed, one line saying where
`--resume` continues) and the command exits 128 + N as a shell reports the signal (143, 129). A
signal ignored when the block starts (`nohup` ignores SIGHUP) stays ignored.

A `KeyboardInterrupt` that the user's own Python raises itself (`raise KeyboardInterrupt` in a reward)
is an error in that code, not a Ctrl-C: `signalled_interrupts` records the SIGINTs that reach the
process while user code runs, and `from_signal` tells the two apart.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TypeAlias

STOPPING = (signal.SIGTERM, signal.SIGHUP)  # what stops a command as Ctrl-C does, exit code 128 + N
STOPS: list[int] = []  # those this process received in `stopping_on_signals` (`cli.main`: what it caused)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived (`signum`): raised where the process was, as Ctrl-C raises its
    KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stopped_by(exc: KeyboardInterrupt) -> tuple[str, int]:
    """How an interrupt is said (`interrupted`, `stopped by SIGTERM`) and the command's exit code."""
    if isinstance(exc, Stopped):
        return f"stopped by {signal.Signals(exc.signum).name}", 128 + exc.signum
    return "interrupted", 128 + signal.SIGINT


Handler: TypeAlias = Callable[[int, FrameType | None], object] | int | None  # what `signal.signal` returns


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    STOPS.append(signum)
    raise Stopped(signum)


def handling(signals: tuple[int, ...], handler: Handler) -> dict[int, Handler]:
    """`handler` for each of `signals` not ignored (main thread only); the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    kept = [sig for sig in signals if signal.getsignal(sig) is not signal.SIG_IGN]
    return {sig: signal.signal(sig, handler) for sig in kept}


def restore_handlers(previous: dict[int, Handler]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """In the block, SIGTERM and SIGHUP raise `Stopped` (see the module)."""
    previous = handling(STOPPING, _raise_stopped)
    try:
        yield
    finally:
        restore_handlers(previous)


@contextmanager
def signalled_interrupts() -> Iterator[list[int]]:
    """The SIGINTs that reach this process in the block, recorded before the handler there was runs
    (main thread: Python raises a Ctrl-C's KeyboardInterrupt nowhere else)."""
    arrived: list[int] = []
    before = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(before):
        yield arrived  # no handler: a SIGINT raises nothing here
        return

    def note(signum: int, frame: FrameType | None) -> object:
        arrived.append(signum)
        return before(signum, frame)

    signal.signal(signal.SIGINT, note)
    try:
        yield arrived
    finally:
        signal.signal(signal.SIGINT, before)


def from_signal(exc: KeyboardInterrupt, arrived: list[int]) -> bool:
    """Whether `exc` came from a signal (a Ctrl-C recorded in `arrived`, SIGTERM, SIGHUP), not from a
    `raise` in the code that ran."""
    return bool(arrived) or isinstance(exc, Stopped)
