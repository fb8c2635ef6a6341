"""What names one file across the workspace (a template path, a Python reference, found as the checker
finds them from each workflow's folder), and a template's rename: its path in every workflow that uses
it, and the file itself, moved by the client (a WorkspaceEdit's RenameFile)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from lsprotocol import types as lsp

from srpo_dsl.lsp.navigation import template_lookup
from srpo_dsl.lsp.occurrences import Occurrence, inside, occurrences
from srpo_dsl.lsp.pyrefs import locate
from srpo_dsl.lsp.rename_checks import path_refusal
from srpo_dsl.lsp.template_includes import included
from srpo_dsl.lsp.workspace_files import WorkspaceFile

Sites = list[tuple[WorkspaceFile, Occurrence]]


def _key(occ: Occurrence, workflow: Path) -> object:
    """The file (and function) a template path or a reference names from `workflow`; None: none found."""
    if occ.kind == "template":
        found = template_lookup(occ.text, str(workflow))
        return found.resolve() if isinstance(found, Path) else None
    target = locate(occ.text, str(workflow))
    return (target.file.resolve(), target.function) if target else None


def same_file(occ: Occurrence, path: str, found: Iterable[WorkspaceFile]) -> Sites:
    """Every use, in the workflows `found`, of the file `occ` names from the workflow `path` (one that names
    no file: its uses in that workflow only)."""
    here = Path(path).resolve()
    key = _key(occ, here)
    keys: dict[tuple[str, Path], object] = {}
    sites: Sites = []
    for w in found:
        if w.tree is None or (key is None and w.path != here):
            continue
        for o in occurrences(w.tree):
            if o.kind != occ.kind:
                continue
            if key is None:
                same = o.text == occ.text
            else:
                same = keys.setdefault((o.text, w.path.parent), _key(o, w.path)) == key
            if same:
                sites.append((w, o))
    return sites


def _target(occ: Occurrence, path: str, rename_files: bool) -> Path | str:
    """The template file to move, else why it cannot be."""
    found = template_lookup(occ.text, path)
    if not isinstance(found, Path):
        return f'"{occ.text}" {found}: there is no file to rename'
    found = found.resolve()
    if not found.is_relative_to(Path(path).resolve().parent):
        return f'"{occ.text}" is one of srpo-dsl\'s own templates: copy it next to the workflow to rename it'
    if not rename_files:
        return (
            "this editor cannot rename files (no `rename` resource operation in its workspace edits): "
            f'rename "{occ.text}" on disk, then its path in each workflow'
        )
    return found


def template_edit(
    occ: Occurrence, path: str, new: str, rename_files: bool, sites: Sites
) -> lsp.WorkspaceEdit | str:
    """The template's path `new` (from the workflow `path`'s folder) in every use `sites` and in the
    templates that include it, and its file moved there; else why not, in one line."""
    target = path_refusal(new) or _target(occ, path, rename_files)
    if isinstance(target, str):
        return target
    moved = Path(path).resolve().parent / new
    if moved.exists():
        return f'"{new}" already exists: renaming onto it would replace that file'
    edits: dict[str, list[lsp.TextEdit]] = {}
    for w, o in sites:
        if not moved.is_relative_to(w.path.parent):
            return (
                f'{w.path.name} finds the template from its own folder, and "{new}" would be out of its reach'
            )
        text = moved.relative_to(w.path.parent).as_posix()
        edits.setdefault(w.uri, []).append(lsp.TextEdit(range=inside(o), new_text=text))
    for file, ranges in included(Path(path).resolve().parent, occ.text).items():
        edits.setdefault(file.as_uri(), []).extend(lsp.TextEdit(range=r, new_text=new) for r in ranges)
    changes = [
        lsp.TextDocumentEdit(
            text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=None), edits=e
        )
        for uri, e in edits.items()
    ]
    return lsp.WorkspaceEdit(
        document_changes=[*changes, lsp.RenameFile(old_uri=target.as_uri(), new_uri=moved.as_uri())]
    )
