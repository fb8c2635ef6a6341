"""What a check read from disk: each path's state as `os.stat` gives it, recorded while the check runs, and
a cache whose results hold only while every file they were computed from is as it was.

A long-running process (the language server) analyses a workflow many times while its templates and its
Python change on disk; a result cached on its arguments alone would be stale. `FileCache` keeps, with each
result, the state of every path the computation looked at (found, missing, or not searchable), and
computes again when any of them changed. `recording()` collects the paths an analysis looks at, so the
server can tell when a workflow's diagnostics may have changed without the workflow itself changing."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

V = TypeVar("V")

# A file written less than this long ago may be written again within one tick of its filesystem's clock
# (a second on some) and keep its size: nothing in its state would change. Such a state is "unsettled",
# and a result computed from it is never reused.
UNSETTLED_NS = 2_000_000_000


@dataclass(frozen=True)
class FileState:
    """A path as `os.stat` sees it: its type, identity, size and times (any write or `chmod` changes one),
    None when there is no such file, or `error` when it cannot be looked at (a folder on the way that
    cannot be searched)."""

    stat: tuple[int, int, int, int, int] | None
    error: str | None = None
    settled: bool = True

    @classmethod
    def of(cls, path: Path) -> FileState:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
            return cls(None)
        except OSError as exc:
            return cls(None, exc.strerror or str(exc))
        settled = time.time_ns() - st.st_mtime_ns > UNSETTLED_NS
        return cls((st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), None, settled)

    @property
    def is_file(self) -> bool:
        return self.stat is not None and stat.S_ISREG(self.stat[0])


Reads = dict[Path, FileState]
_RECORDING: ContextVar[Reads | None] = ContextVar("srpo_dsl_reads", default=None)


def look(path: Path) -> FileState:
    """The state of `path`, recorded (its first state wins) when a `recording()` is open."""
    state = FileState.of(path)
    _remember({path: state})
    return state


def _remember(reads: Mapping[Path, FileState]) -> None:
    recording = _RECORDING.get()
    if recording is not None:
        for path, state in reads.items():
            recording.setdefault(path, state)


@contextlib.contextmanager
def recording() -> Iterator[Reads]:
    """The states of the paths looked at inside the block (a recording around it gets them too)."""
    reads: Reads = {}
    token = _RECORDING.set(reads)
    try:
        yield reads
    finally:
        _RECORDING.reset(token)
        _remember(reads)


def unchanged(reads: Mapping[Path, FileState]) -> bool:
    """Every path is as it was when recorded, and was settled then."""
    return all(state.settled and FileState.of(path) == state for path, state in reads.items())


class FileCache(Generic[V]):
    """Results keyed on their arguments, each used only while the paths it looked at are unchanged;
    the least recently used beyond `size` are dropped."""

    def __init__(self, size: int):
        self.size = size
        self.entries: OrderedDict[Hashable, tuple[Reads, V]] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The cached result for `key` if its files are unchanged, else `compute()`'s (then cached)."""
        hit = self.entries.get(key)
        if hit is not None and unchanged(hit[0]):
            self.entries.move_to_end(key)
            _remember(hit[0])
            return hit[1]
        with recording() as reads:
            value = compute()
        self.entries[key] = (reads, value)
        self.entries.move_to_end(key)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return value
