"""Progress on stderr: a redrawn bar on a terminal (tqdm), plain lines in a pipe or a log file.

In a pipe a bar would be hundreds of `\\r` redraws in one line; there, progress is one line per interval:
each tenth of the total and at least every SRPO_DSL_PROGRESS_SECONDS seconds (default 30; 0: every
update), whichever comes first, and one at the end. Nothing under --quiet (`console`), or with
TQDM_DISABLE=1 (tqdm's own switch, honoured in both forms)."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import Generic, Protocol, TypeVar, overload

from srpo_dsl.console import note, quiet
from srpo_dsl.errors import UsageError

SECONDS_ENV = "SRPO_DSL_PROGRESS_SECONDS"
DEFAULT_SECONDS = 30.0
LINES = 10  # a line each tenth of the total


def interval_seconds() -> float:
    """SRPO_DSL_PROGRESS_SECONDS, checked: a number >= 0."""
    value = os.environ.get(SECONDS_ENV, "").strip()
    if not value:
        return DEFAULT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"{SECONDS_ENV}={value}: expected a number of seconds, 0 or more")
    return seconds


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Bar(Protocol[T_co]):
    """What `progress` returns (tqdm's bar or `Lines`): iterated over, or updated by hand."""

    def __iter__(self) -> Iterator[T_co]: ...

    def __enter__(self) -> Bar[T_co]: ...

    def __exit__(self, *exc: object) -> None: ...

    def set_postfix_str(self, postfix: str) -> None: ...

    def update(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


@overload
def progress(
    iterable: Iterable[T],
    *,
    total: int | None = ...,
    desc: str,
    unit: str,
    enabled: bool = ...,
    initial: int = ...,
    leave: bool = ...,
) -> Bar[T]: ...


@overload
def progress(
    iterable: None = ...,
    *,
    total: int | None = ...,
    desc: str,
    unit: str,
    enabled: bool = ...,
    initial: int = ...,
    leave: bool = ...,
) -> Bar[None]: ...  # a bar updated by hand


def progress(
    iterable: Iterable[T] | None = None,
    *,
    total: int | None = None,
    desc: str,
    unit: str,
    enabled: bool = True,
    initial: int = 0,
    leave: bool = True,
) -> Bar[T] | Bar[None]:
    """A bar over `iterable` (or updated by hand: `update(n)`), with `set_postfix_str` and `close`, usable
    as a context manager: tqdm on a terminal (its last frame kept unless `leave=False`), `Lines` elsewhere."""
    shown = enabled and not quiet() and os.environ.get("TQDM_DISABLE", "").lower() not in ("1", "true")
    if total is None and isinstance(iterable, Sized):
        total = initial + len(iterable)
    if shown and sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial, leave=leave)
    return Lines(iterable, total, desc, unit, initial, shown)


def write(message: str) -> None:
    """A line on stderr, above a terminal's bar (unless --quiet)."""
    if not quiet() and sys.stderr.isatty():
        from tqdm import tqdm

        tqdm.write(message, file=sys.stderr)
    else:
        note(message)


class Lines(Generic[T]):
    """Progress as whole lines: `DESC: N/TOTAL UNITs (P%), T s[, POSTFIX]`."""

    def __init__(
        self,
        iterable: Iterable[T] | None,
        total: int | None,
        desc: str,
        unit: str,
        initial: int,
        shown: bool,
    ):
        self.iterable, self.total, self.desc, self.unit, self.shown = iterable, total, desc, unit, shown
        self.n = self.printed = initial
        self.every = max(1, math.ceil(total / LINES)) if total else None
        self.seconds = interval_seconds() if shown else DEFAULT_SECONDS
        self.began = self.last = time.monotonic()
        self.postfix = ""

    def __iter__(self) -> Iterator[T]:
        assert self.iterable is not None
        for item in self.iterable:
            yield item
            self.update(1)

    def __enter__(self) -> Lines[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_postfix_str(self, postfix: str) -> None:
        self.postfix = postfix

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        due = self.every is not None and self.n - self.printed >= self.every
        if due or now - self.last >= self.seconds or self.n == self.total:
            self.show(now)

    def close(self) -> None:
        """What is not yet shown (a run that stops early), once."""
        if self.n != self.printed:
            self.show(time.monotonic())

    def show(self, now: float) -> None:
        self.printed, self.last = self.n, now
        if not self.shown:
            return
        done = f"{self.n}/{self.total} {self.unit}s" if self.total else f"{self.n} {self.unit}s"
        done += f" ({100 * self.n // self.total}%)" if self.total else ""
        postfix = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {done}, {now - self.began:.0f} s{postfix}", file=sys.stderr, flush=True)
