"""textDocument/formatting: `srpo-dsl fmt`'s layout as one whole-document edit."""

from __future__ import annotations

from lsprotocol import types as lsp

from srpo_dsl.lang.syntax.messages import SrpoError
from srpo_dsl.lang.tooling.format import format_source
from srpo_dsl.lsp.positions import whole_document


def format_edits(text: str, path: str) -> list[lsp.TextEdit]:
    """The edit that formats `text`; none when it is already formatted or does not parse."""
    try:
        formatted = format_source(text, path)
    except SrpoError:
        return []
    if formatted == text:
        return []
    return [lsp.TextEdit(range=whole_document(text), new_text=formatted)]
