"""textDocument/references, prepareRename and rename.

A declared name (agent, policy, tool, environment) is the file's own: its references and rename are
every place the file names it, a tool's actions (`act(search, ...)`, `only search`, `== search`)
included. A template path and a Python reference name a file: their references are their uses in every
workflow of the workspace (`workspace_files`), and renaming a template renames its path in each of them
and the file itself. A rename that would break a workflow is refused with a message (`Refused`, an LSP
error the client shows): the reasons are `rename_checks`'."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from srpo_dsl.lsp.occurrences import Occurrence, declarations, inside, occurrence_at, occurrences
from srpo_dsl.lsp.rename_checks import name_refusal
from srpo_dsl.lsp.symbols import parsed
from srpo_dsl.lsp.template_rename import Sites, same_file, template_edit
from srpo_dsl.lsp.workspace_files import workflows

RENAMED = ("agent", "policy", "tool", "env", "template")
SHARED = ("template", "ref")  # what names a file: found in every workflow of the workspace


class Refused(JsonRpcException):
    """A rename that would break a workflow: the reply is this error, its message says why."""

    CODE = lsp.LSPErrorCodes.RequestFailed


class _Answered(logging.Filter):
    """pygls logs every error reply with its traceback: a refusal is an answer, not a fault of the server."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], Refused))


logging.getLogger("pygls.protocol.json_rpc").addFilter(_Answered())


def _same(
    text: str, path: str, pos: lsp.Position, kinds=RENAMED
) -> tuple[Occurrence, list[Occurrence]] | None:
    """The occurrence under `pos` (one of `kinds`) and every occurrence of the same thing in the file."""
    program = parsed(text, path)
    occ = occurrence_at(program, pos) if program else None
    if occ is None or occ.kind not in kinds:
        return None
    if occ.kind not in SHARED and occ.text not in declarations(program)[occ.kind]:
        return None  # an undefined name: nothing to rename it with
    return occ, [o for o in occurrences(program) if (o.kind, o.text) == (occ.kind, occ.text)]


Opened = Mapping[Path, tuple[str, str]]  # each open document's resolved path -> (uri, text)


def _opened(text: str, path: str, uri: str, opened: Opened | None) -> dict[Path, tuple[str, str]]:
    return {**(opened or {}), Path(path).resolve(): (uri, text)}


def references(
    text: str,
    path: str,
    uri: str,
    pos: lsp.Position,
    declaration: bool,
    root: Path | None = None,
    opened: Opened | None = None,
) -> list[lsp.Location]:
    """Where the name, template path or Python reference under `pos` is written (a name's declaration only
    with `declaration`; a path's or reference's uses in every workflow under `root` and open)."""
    found = _same(text, path, pos, (*RENAMED, "ref"))
    if found is None:
        return []
    occ, same = found
    if occ.kind in SHARED:
        sites = same_file(occ, path, workflows(root, _opened(text, path, uri, opened)))
        return [lsp.Location(uri=w.uri, range=inside(o)) for w, o in sites]
    decl = declarations(parsed(text, path))[occ.kind][occ.text]
    return [lsp.Location(uri=uri, range=inside(o)) for o in same if declaration or o.span != decl.name.span]


def prepare_rename(text: str, path: str, pos: lsp.Position) -> lsp.PrepareRenamePlaceholder | None:
    found = _same(text, path, pos)
    if found is None:
        return None
    occ = found[0]
    return lsp.PrepareRenamePlaceholder(range=inside(occ), placeholder=occ.text)


def rename(
    text: str,
    path: str,
    uri: str,
    pos: lsp.Position,
    new: str,
    rename_files: bool,
    root: Path | None = None,
    opened: Opened | None = None,
) -> lsp.WorkspaceEdit | None:
    """Every occurrence of what is under `pos` becomes `new` (None: nothing to rename there); a
    template's path in every workflow that uses it, and its file (`rename_files`: the client can).
    Refused when `new` would break a workflow."""
    found = _same(text, path, pos)
    if found is None:
        return None
    occ, same = found
    if new == occ.text:
        return lsp.WorkspaceEdit(changes={})
    if occ.kind == "template":
        sites: Sites = same_file(occ, path, workflows(root, _opened(text, path, uri, opened)))
        why = template_edit(occ, path, new, rename_files, sites)
        if isinstance(why, str):
            raise Refused(why)
        return why
    why = name_refusal(occ.kind, occ.text, new, parsed(text, path))
    if why is not None:
        raise Refused(why)
    return lsp.WorkspaceEdit(changes={uri: [lsp.TextEdit(range=inside(o), new_text=new) for o in same]})
