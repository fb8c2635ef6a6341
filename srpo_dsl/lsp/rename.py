"""textDocument/references, prepareRename and rename: agents, policies, tools, environments (every place
the file names one) and template paths (every prompt that names the file; the file itself is renamed
where the client can)."""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp

from srpo_dsl.lang.grammar import grammar_text
from srpo_dsl.lsp.navigation import template_lookup
from srpo_dsl.lsp.occurrences import Occurrence, declarations, occurrence_at, occurrences
from srpo_dsl.lsp.positions import span_range
from srpo_dsl.lsp.symbols import parsed

RENAMED = ("agent", "policy", "tool", "env", "template")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATH = re.compile(r'[^"\\\n]+')


def _same(text: str, path: str, pos: lsp.Position) -> tuple[Occurrence, list[Occurrence]] | None:
    """The occurrence under `pos` (a kind that renames) and every occurrence of the same thing."""
    program = parsed(text, path)
    occ = occurrence_at(program, pos) if program else None
    if occ is None or occ.kind not in RENAMED:
        return None
    if occ.kind != "template" and occ.text not in declarations(program)[occ.kind]:
        return None  # an undefined name: nothing to rename it with
    return occ, [o for o in occurrences(program) if (o.kind, o.text) == (occ.kind, occ.text)]


def _inside(occ: Occurrence) -> lsp.Range:
    """The range of a name, or of a template path without its quotes."""
    rng = span_range(occ.span)
    if occ.kind == "template":
        rng.start.character += 1
        rng.end.character -= 1
    return rng


def references(text: str, path: str, uri: str, pos: lsp.Position, declaration: bool) -> list[lsp.Location]:
    """Where the name or template path under `pos` is written (its declaration only with `declaration`)."""
    found = _same(text, path, pos)
    if found is None:
        return []
    occ, same = found
    decl = declarations(parsed(text, path))[occ.kind].get(occ.text) if occ.kind != "template" else None
    return [
        lsp.Location(uri=uri, range=_inside(o))
        for o in same
        if declaration or decl is None or o.span != decl.name.span
    ]


def prepare_rename(text: str, path: str, pos: lsp.Position) -> lsp.PrepareRenamePlaceholder | None:
    found = _same(text, path, pos)
    if found is None:
        return None
    occ = found[0]
    return lsp.PrepareRenamePlaceholder(range=_inside(occ), placeholder=occ.text)


def _valid(kind: str, new: str) -> bool:
    if kind == "template":
        return bool(_PATH.fullmatch(new))
    return bool(_IDENT.fullmatch(new)) and f'"{new}"' not in grammar_text()


def rename(
    text: str, path: str, uri: str, pos: lsp.Position, new: str, rename_files: bool
) -> lsp.WorkspaceEdit | None:
    """Every occurrence of what is under `pos` becomes `new` (None: nothing to rename there, or `new` is
    not a name, or is a keyword). A template's file is renamed too with `rename_files`, when it is in the
    workflow's folder."""
    found = _same(text, path, pos)
    if found is None or not _valid(found[0].kind, new):
        return None
    occ, same = found
    edits = [lsp.TextEdit(range=_inside(o), new_text=new) for o in same]
    folder = Path(path).resolve().parent
    target = template_lookup(occ.text, path) if occ.kind == "template" else None
    if not rename_files or not isinstance(target, Path) or not target.resolve().is_relative_to(folder):
        return lsp.WorkspaceEdit(changes={uri: edits})  # not a template, or one of the package's
    moved = folder / new
    doc = lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=None)
    return lsp.WorkspaceEdit(
        document_changes=[
            lsp.TextDocumentEdit(text_document=doc, edits=edits),
            lsp.RenameFile(old_uri=target.resolve().as_uri(), new_uri=moved.as_uri()),
        ]
    )
