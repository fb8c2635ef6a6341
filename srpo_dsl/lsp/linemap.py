"""Positions of an older text of a document on its current text, by the lines the edits left alone.

The rule: the lines before the first line that differs are the same lines in both texts, and so
are the lines after the last one that differs (counted from the end; they have moved by the
number of lines added or removed). A position on such a line keeps its character and moves with
its line; a position on an edited line is on neither text's counterpart and maps to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types as lsp


def _common_prefix(a: list[str], b: list[str]) -> int:
    """How many lines `a` and `b` share at their start."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@dataclass(frozen=True)
class LineMap:
    """`head`: the lines the texts share at their start; `old_tail`, `new_tail`: where the lines they
    share at their end start in the older text and in the current one."""

    head: int
    old_tail: int
    new_tail: int

    @classmethod
    def between(cls, old: str, new: str) -> LineMap:
        """The map from `old`'s lines to `new`'s (lines end at "\\n", as the parser counts them)."""
        a, b = old.split("\n"), new.split("\n")
        head = _common_prefix(a, b)
        tail = _common_prefix(a[head:][::-1], b[head:][::-1])
        return cls(head, len(a) - tail, len(b) - tail)

    @property
    def unchanged(self) -> bool:
        """Whether the texts have the same lines (every position maps to itself)."""
        return self.head == self.old_tail == self.new_tail

    def to_new(self, line: int) -> int | None:
        """The current line of the older text's `line`; None when it was edited."""
        if line < self.head:
            return line
        return line - self.old_tail + self.new_tail if line >= self.old_tail else None

    def to_old(self, line: int) -> int | None:
        """The older text's line of the current `line`; None when it is an edited line."""
        if line < self.head:
            return line
        return line - self.new_tail + self.old_tail if line >= self.new_tail else None

    def position_to_old(self, pos: lsp.Position) -> lsp.Position | None:
        line = self.to_old(pos.line)
        return None if line is None else lsp.Position(line=line, character=pos.character)

    def range_to_new(self, rng: lsp.Range) -> lsp.Range | None:
        """The range on the current text, when both of its ends are on lines left alone."""
        start, end = self.to_new(rng.start.line), self.to_new(rng.end.line)
        if start is None or end is None:
            return None
        return lsp.Range(
            start=lsp.Position(line=start, character=rng.start.character),
            end=lsp.Position(line=end, character=rng.end.character),
        )
