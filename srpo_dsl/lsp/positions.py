"""Between the language's 1-based spans and LSP's 0-based ranges (in code points)."""

from __future__ import annotations

from lsprotocol import types as lsp

from srpo_dsl.lang.syntax.messages import Span


def span_range(span: Span) -> lsp.Range:
    """The 0-based range of a 1-based span whose end column is exclusive."""
    return lsp.Range(
        start=lsp.Position(line=max(span.line - 1, 0), character=max(span.col - 1, 0)),
        end=lsp.Position(line=max(span.end_line - 1, 0), character=max(span.end_col - 1, 0)),
    )


def contains(span: Span | None, pos: lsp.Position) -> bool:
    """Whether the 0-based `pos` lies in `span` (its end included: a cursor just after a name is on it)."""
    if span is None:
        return False
    here = (pos.line + 1, pos.character + 1)
    return (span.line, span.col) <= here <= (span.end_line, span.end_col)


def whole_document(text: str) -> lsp.Range:
    """The range that covers all of `text`."""
    lines = text.split("\n")
    return lsp.Range(
        start=lsp.Position(line=0, character=0),
        end=lsp.Position(line=len(lines) - 1, character=len(lines[-1])),
    )
