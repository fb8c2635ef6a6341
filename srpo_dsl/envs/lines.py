"""Where the records of a JSON-lines file start: one scan of its bytes, no parsing.

`LineIndex.scan` maps the file and finds its newlines with numpy, a chunk at a time (the scan's own
memory stays at a few times `CHUNK`: each chunk's pages are released once scanned), then drops blank
lines (a line that is empty or whitespace once decoded, as `str.strip` sees it). What it keeps is 8
bytes per record (where it starts) and, only when the file has blank lines, 8 more (its line number).
A record's bytes are read from the map when asked for (`LineIndex.raw`).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CHUNK = 1 << 26  # bytes compared at a time: the scan's temporary arrays stay near this size
NEWLINE, OPEN_BRACE = 0x0A, 0x7B


@dataclass(frozen=True)
class LineIndex:
    """The records of `path`: their starting offsets and, where blank lines intervene, line numbers."""

    path: Path
    starts: np.ndarray  # int64: where each record's line starts
    lines: np.ndarray | None  # int64: each record's line number (1-based); None: record i is on line i + 1
    data: mmap.mmap | bytes

    @classmethod
    def scan(cls, path: Path, limit: int | None = None) -> LineIndex:
        """The first `limit` (None: all) non-blank lines of `path`."""
        data = _mapped(path)
        view = np.frombuffer(data, dtype=np.uint8)
        starts, suspects = _line_starts(data, view)
        keep = _non_blank(data, starts, suspects)
        numbers = None if keep is None else np.flatnonzero(keep).astype(np.int64) + 1
        if keep is not None:
            starts = starts[keep]
        if limit is not None:
            starts = starts[:limit]
            numbers = None if numbers is None else numbers[:limit]
        return cls(path, starts, numbers, data)

    def __len__(self) -> int:
        return len(self.starts)

    def line(self, i: int) -> int:
        """The 1-based line number of record `i`."""
        return i + 1 if self.lines is None else int(self.lines[i])

    def raw(self, i: int) -> tuple[int, bytes]:
        """(offset, bytes) of record `i`'s line, its newline included (its pages released once copied: a
        long run that draws rows all over the file does not gather the file in its memory)."""
        start = int(self.starts[i])
        end = self.data.find(b"\n", start)
        stop = len(self.data) if end < 0 else end + 1
        line = self.data[start:stop]
        _release(self.data, start, stop - start)
        return start, line


def _mapped(path: Path) -> mmap.mmap | bytes:
    """The file's bytes, mapped read-only (an empty file cannot be mapped: its empty bytes)."""
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _line_starts(data: mmap.mmap | bytes, view: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The offset of every line's first byte (a final newline starts no line), and the indices of the
    lines that do not open with `{`. A chunk's pages leave this process's memory once scanned (they stay
    in the page cache): the scan's resident memory is about one chunk, not the file."""
    starts, suspects, count = [], [], 0
    for at in range(0, len(view), CHUNK):
        chunk = view[at : at + CHUNK]
        found = np.flatnonzero(chunk[:-1] == NEWLINE) + 1  # a newline at the chunk's end: the next chunk's
        if at == 0 or view[at - 1] == NEWLINE:
            found = np.concatenate([np.zeros(1, dtype=found.dtype), found])
        starts.append(found.astype(np.int64) + at)
        suspects.append(np.flatnonzero(chunk[found] != OPEN_BRACE).astype(np.int64) + count)
        count += len(found)
        _release(data, at, len(chunk))
    if not starts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(starts), np.concatenate(suspects)


def _release(data: mmap.mmap | bytes, at: int, length: int) -> None:
    """Drop the mapped pages of `data[at : at + length]` (from the page holding `at`) from this process."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if isinstance(data, mmap.mmap) and advice is not None:
        start = at - at % mmap.PAGESIZE
        data.madvise(advice, start, at + length - start)


def _non_blank(data: mmap.mmap | bytes, starts: np.ndarray, suspects: np.ndarray) -> np.ndarray | None:
    """Which lines hold something (a bool mask), or None when all do. A line opening with `{` does; the
    others (`suspects`) are decoded and stripped here (a file of JSON objects has none)."""
    if not len(suspects):
        return None
    keep = np.ones(len(starts), dtype=bool)
    for k in suspects.tolist():
        end = data.find(b"\n", int(starts[k]))
        line = data[int(starts[k]) : len(data) if end < 0 else end]
        keep[k] = bool(line.decode("utf-8", errors="replace").strip())
    return None if keep.all() else keep
