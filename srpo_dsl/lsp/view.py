"""What hover, definition and symbols answer from: the last good analysis of a document.

While the text has a syntax error there is no syntax tree of it; the requests then use the tree of
the last text that parsed, on the lines the edits since have left alone (`linemap`): a position
is looked up there only on such a line, and a range is shown only when both of its ends are on
such lines (moved with them). When the text parses, the map is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types as lsp

from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lsp.linemap import LineMap


@dataclass(frozen=True)
class Good:
    """A text of a document that parsed: its syntax tree, and its compiled graph when it checked."""

    text: str
    tree: n.Program
    graph: EventGraph | None


@dataclass(frozen=True)
class View:
    """`good` seen from the document's current `text`."""

    good: Good
    text: str
    lines: LineMap

    @classmethod
    def of(cls, good: Good, text: str) -> View:
        return cls(good, text, LineMap.between(good.text, text))

    @property
    def tree(self) -> n.Program:
        return self.good.tree

    def at(self, pos: lsp.Position) -> lsp.Position | None:
        """Where the current text's `pos` is in the tree's text (None: on an edited line)."""
        return self.lines.position_to_old(pos)

    def shown(self, rng: lsp.Range) -> lsp.Range | None:
        """A range of the tree's text on the current text (None: it touches an edited line)."""
        return self.lines.range_to_new(rng)
