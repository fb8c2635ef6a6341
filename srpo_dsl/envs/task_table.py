"""The tasks of a JSON-lines file as a sequence whose rows are parsed when asked for.

Opening one scans the file for where its lines start (`lines.LineIndex`); `table[i]` reads line i,
checks its size, parses it and normalizes it (the `normalize` it was given) then, not before. A bad
row is a ValueError naming `FILE:LINE`, raised when that row is first asked for. Rows are not kept:
memory is the index and the rows the caller holds.

Ids must be unique (they group the rollouts of one prompt): a row whose id another row already
claimed gets `@<row>` appended, as the eager reader does. Here the claim goes to the row asked for
first, and stays with it (the claims are kept: one entry per distinct row asked for); for a file
without repeated ids nothing differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import overload

from srpo_dsl.envs.lines import LineIndex
from srpo_dsl.io import not_utf8

Normalize = Callable[[object, int, str], dict]  # (record, row, where) -> task; ValueError naming where
SizeCheck = Callable[[str, object, int], None]  # (where, line, its bytes); ValueError if too large


class JsonlTasks(Sequence[dict]):
    """The tasks of `index`'s file, row i parsed and normalized by `normalize` on `self[i]`."""

    def __init__(self, index: LineIndex, normalize: Normalize, size_check: SizeCheck) -> None:
        self.index, self.normalize, self.size_check = index, normalize, size_check
        self.claims: dict[str, int] = {}

    @property
    def path(self) -> Path:
        return self.index.path

    def __len__(self) -> int:
        return len(self.index)

    @overload
    def __getitem__(self, i: int) -> dict: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict]: ...

    def __getitem__(self, i: int | slice) -> dict | list[dict]:
        if isinstance(i, slice):
            return [self.row(j) for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"task row {i} out of range ({len(self)} rows)")
        return self.row(i % len(self))

    def __iter__(self) -> Iterator[dict]:
        return (self.row(j) for j in range(len(self)))

    def row(self, i: int) -> dict:
        """Row `i` (0-based, non-negative), parsed and normalized now."""
        where = f"{self.path}:{self.index.line(i)}"
        offset, raw = self.index.raw(i)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: {not_utf8(exc, offset)}") from None
        self.size_check(where, line, len(raw))
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: invalid JSON ({exc.msg})") from None
        task = self.normalize(record, i, where)
        owner = self.claims.setdefault(task["id"], i)
        if owner != i:
            task["id"] = f"{task['id']}@{i}"
        return task
