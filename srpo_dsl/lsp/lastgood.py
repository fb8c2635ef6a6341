"""References, rename, folding and links while the text has a syntax error: they read the last text
that parsed (`view.Good`), and their answers are moved onto the current text (`view.View.shown`); what
lies on a line edited since is left out, and a rename that would touch such a line is refused (an
edit left out would break the workflow)."""

from __future__ import annotations

from lsprotocol import types as lsp

from srpo_dsl.lsp.rename import Refused
from srpo_dsl.lsp.view import View


def behind(view: View | None, text: str) -> View | None:
    """`view` when its good text is not `text` (the current text does not parse); else None: the
    features read the current text."""
    return view if view is not None and view.good.text != text else None


def locations(view: View, found: list[lsp.Location], uri: str) -> list[lsp.Location]:
    """`found` in the good text, those of this document moved onto the current text."""
    out = []
    for loc in found:
        rng = view.shown(loc.range) if loc.uri == uri else loc.range
        if rng is not None:
            out.append(lsp.Location(uri=loc.uri, range=rng))
    return out


def links(view: View, found: list[lsp.DocumentLink]) -> list[lsp.DocumentLink]:
    out = []
    for link in found:
        rng = view.shown(link.range)
        if rng is not None:
            link.range = rng
            out.append(link)
    return out


def folds(view: View, found: list[lsp.FoldingRange]) -> list[lsp.FoldingRange]:
    out = []
    for fold in found:
        start, end = view.lines.to_new(fold.start_line), view.lines.to_new(fold.end_line)
        if start is not None and end is not None:
            out.append(lsp.FoldingRange(start_line=start, end_line=end, kind=fold.kind))
    return out


def _moved(view: View, edit: lsp.TextEdit) -> lsp.TextEdit:
    rng = view.shown(edit.range)
    if rng is None:
        line = edit.range.start.line + 1
        raise Refused(f"cannot rename while the file has a syntax error on a line it renames ({line})")
    return lsp.TextEdit(range=rng, new_text=edit.new_text)


def workspace_edit(view: View, found: lsp.WorkspaceEdit | None, uri: str) -> lsp.WorkspaceEdit | None:
    """A rename's edits of this document moved onto the current text; refused (`rename.Refused`) when
    one of them is on a line edited since the last good text."""
    if found is None:
        return None
    for change in found.document_changes or []:
        if isinstance(change, lsp.TextDocumentEdit) and change.text_document.uri == uri:
            change.edits = [_moved(view, e) for e in change.edits]
    if found.changes and uri in found.changes:
        found.changes[uri] = [_moved(view, e) for e in found.changes[uri]]
    return found
