"""The places a template names another (`{% include "math/_environment.j2" %}`, `import`, `extends`,
`from`): a template's rename renames them too, in every template under the workflow's folder (where a
template's name is found from, as a prompt's is)."""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp

INCLUDE_TAG = re.compile(r"""\{%-?\s*(?:include|import|extends|from)\s+(["'])([^"'\n]+)\1""")
SUFFIXES = (".j2", ".jinja", ".jinja2")


def _range(text: str, start: int, end: int) -> lsp.Range:
    def at(offset: int) -> lsp.Position:
        line = text.count("\n", 0, offset)
        return lsp.Position(line=line, character=offset - (text.rfind("\n", 0, offset) + 1))

    return lsp.Range(start=at(start), end=at(end))


def included(folder: Path, name: str) -> dict[Path, list[lsp.Range]]:
    """Each template under `folder` that names `name` in a tag -> the ranges of that name (in code points)."""
    found: dict[Path, list[lsp.Range]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # unreadable: its own check says so (E081)
        for m in INCLUDE_TAG.finditer(text):
            if m.group(2) == name:
                found.setdefault(path.resolve(), []).append(_range(text, m.start(2), m.end(2)))
    return found
