"""textDocument/documentLink: each prompt's template file, and each `"f.py:fn"` reference's file at the
line of its `def` (found with `ast`)."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types as lsp

from srpo_dsl.lsp.navigation import template_lookup
from srpo_dsl.lsp.occurrences import occurrences
from srpo_dsl.lsp.positions import span_range
from srpo_dsl.lsp.pyrefs import locate
from srpo_dsl.lsp.symbols import parsed


def _target(kind: str, text: str, path: str) -> str | None:
    if kind == "template":
        found = template_lookup(text, path)
        return found.resolve().as_uri() if isinstance(found, Path) else None
    target = locate(text, path) if kind == "ref" else None
    return f"{target.file.resolve().as_uri()}#L{target.line}" if target else None


def document_links(text: str, path: str) -> list[lsp.DocumentLink]:
    """A link on each template path and Python reference that names a file there is (inside its quotes)."""
    program = parsed(text, path)
    links = []
    for occ in occurrences(program) if program else []:
        target = _target(occ.kind, occ.text, path)
        if target is not None:
            rng = span_range(occ.span)
            rng.start.character += 1
            rng.end.character -= 1
            links.append(lsp.DocumentLink(range=rng, target=target, tooltip=f"open {occ.text}"))
    return links
