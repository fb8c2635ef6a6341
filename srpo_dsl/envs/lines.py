"""Where the records of a JSON-lines file start: one scan of its bytes, no parsing.

`LineIndex.scan` maps the file and finds its newlines with numpy, a chunk at a time (the scan's own
memory stays at a few times `CHUNK`), then drops blank lines (a line that is empty or whitespace once
decoded, as `str.strip` sees it). What it keeps is 8 bytes per record (where it starts) and, only when
the file has blank lines, 8 more (its line number). A record's bytes are read from the map when asked
for (`LineIndex.raw`).
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
        starts = _line_starts(view)
        keep = _non_blank(data, view, starts)
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
        """(offset, bytes) of record `i`'s line, its newline included."""
        start = int(self.starts[i])
        end = self.data.find(b"\n", start)
        return start, self.data[start : len(self.data) if end < 0 else end + 1]


def _mapped(path: Path) -> mmap.mmap | bytes:
    """The file's bytes, mapped read-only (an empty file cannot be mapped: its empty bytes)."""
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _line_starts(view: np.ndarray) -> np.ndarray:
    """The offset of every line's first byte (a final newline starts no line)."""
    found = [np.zeros(1 if len(view) else 0, dtype=np.int64)]
    for at in range(0, len(view), CHUNK):
        found.append(np.flatnonzero(view[at : at + CHUNK] == NEWLINE).astype(np.int64) + (at + 1))
    starts = np.concatenate(found)
    return starts[starts < len(view)]


def _non_blank(data: mmap.mmap | bytes, view: np.ndarray, starts: np.ndarray) -> np.ndarray | None:
    """Which lines hold something (a bool mask), or None when all do. A line opening with `{` does; any
    other is decoded and stripped here (a file of JSON objects has none)."""
    if not len(starts):
        return None
    suspects = np.flatnonzero(view[starts] != OPEN_BRACE)
    if not len(suspects):
        return None
    keep = np.ones(len(starts), dtype=bool)
    for k in suspects.tolist():
        end = data.find(b"\n", int(starts[k]))
        line = data[int(starts[k]) : len(data) if end < 0 else end]
        keep[k] = bool(line.decode("utf-8", errors="replace").strip())
    return None if keep.all() else keep
