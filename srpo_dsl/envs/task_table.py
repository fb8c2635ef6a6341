"""The tasks of a JSON-lines file as a sequence whose rows are parsed when asked for.

Opening one scans the file for where its lines start (`lines.LineIndex`); `table[i]` reads line i,
checks its size, parses it and normalizes it (the `normalize` it was given) then, not before. A bad
row is a ValueError naming `FILE:LINE`, raised when that row is first asked for. Rows are not kept:
memory is the index and the rows the caller holds.

Ids group the rollouts of one prompt, so the rows used together must not share one. The eager reader
appends `@<row>` to a repeated id across the whole file; here that is done within the rows asked for
together (`pick`: a step's prompts; a slice; the whole file when iterated): the lowest row keeps the id.
For a file without repeated ids, or rows read in file order, the ids are the eager reader's; for
another, a row's id depends only on the rows it is drawn with (the same in a resumed run).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import overload

from srpo_dsl.envs.lines import LineIndex
from srpo_dsl.io import loads, not_utf8

Normalize = Callable[[object, int, str], dict]  # (record, row, where) -> task; ValueError naming where
SizeCheck = Callable[[str, object, int], None]  # (where, line, its bytes); ValueError if too large


class LazyTasks(Sequence[dict]):
    """Tasks read one row at a time (`row(i)`, a subclass's); repeated ids made unique as above."""

    @abstractmethod
    def row(self, i: int) -> dict:
        """Row `i` (0-based, non-negative), read and normalized now."""

    @overload
    def __getitem__(self, i: int) -> dict: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict]: ...

    def __getitem__(self, i: int | slice) -> dict | list[dict]:
        if isinstance(i, slice):
            return pick(self, range(*i.indices(len(self))))
        if not -len(self) <= i < len(self):
            raise IndexError(f"task row {i} out of range ({len(self)} rows)")
        return self.row(i % len(self))

    def __iter__(self) -> Iterator[dict]:
        seen: set[str] = set()
        for j in range(len(self)):
            yield _unique(self.row(j), j, seen)


class JsonlTasks(LazyTasks):
    """The tasks of `index`'s file, row i parsed and normalized by `normalize` on `self[i]`."""

    def __init__(self, index: LineIndex, normalize: Normalize, size_check: SizeCheck) -> None:
        self.index, self.normalize, self.size_check = index, normalize, size_check

    @property
    def path(self) -> Path:
        return self.index.path

    def __len__(self) -> int:
        return len(self.index)

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
            record = loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: invalid JSON ({exc.msg})") from None
        return self.normalize(record, i, where)


def pick(tasks: Sequence[dict], rows: Iterable[int]) -> list[dict]:
    """`[tasks[i] for i in rows]`, a repeated id among them made unique: the lowest row keeps it, the
    others get `@<row>` (a list from the eager reader has none)."""
    rows = list(rows)
    got = {i: tasks[i] for i in rows}
    seen: set[str] = set()
    for i in sorted(got):
        got[i] = _unique(got[i], i, seen)
    return [got[i] for i in rows]


def _unique(task: dict, row: int, seen: set[str]) -> dict:
    """`task`, with `@<row>` on its id when `seen` holds it; its id is added to `seen`."""
    if task["id"] in seen:
        task = {**task, "id": f"{task['id']}@{row}"}
    seen.add(task["id"])
    return task
