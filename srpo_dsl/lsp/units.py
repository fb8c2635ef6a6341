"""Between the features' positions (code points) and the client's units (UTF-16 by default).

One `Units` per request: the text is split into lines once (at "\\n", as the parser counts them), and
not at all when it is ASCII, where every unit is a code point and nothing needs converting.
"""

from __future__ import annotations

from lsprotocol import types as lsp
from pygls.workspace import TextDocument


class Units:
    """The positions of one text of `doc` (its current one)."""

    def __init__(self, doc: TextDocument):
        self.codec = doc.position_codec
        text = doc.source
        self.lines = None if text.isascii() else text.split("\n")

    def range(self, rng: lsp.Range) -> lsp.Range:
        """`rng` in the client's units."""
        if self.lines is None:
            return rng
        return lsp.Range(start=self._to_client(rng.start), end=self._to_client(rng.end))

    def _to_client(self, pos: lsp.Position) -> lsp.Position:
        if pos.line >= len(self.lines):
            return pos
        units = self.codec.client_num_units(self.lines[pos.line][: pos.character])
        return lsp.Position(line=pos.line, character=units)

    def from_client(self, pos: lsp.Position) -> lsp.Position:
        """The client's `pos` in code points."""
        if self.lines is None:
            return pos
        found = self.codec.position_from_client_units(self.lines, pos)
        return lsp.Position(line=found.line, character=found.character)
