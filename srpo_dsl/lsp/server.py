"""The pygls server: a change schedules its document's analysis, which publishes the diagnostics
(`documents`: a burst of edits is analysed once; the cycle collector waits for a pause: `collector`);
each request calls its feature module on the document's last good analysis (`view`) and converts
the positions to the client's units (`units`); the diagnostics of open workflows are published
again when the files they read change (`watch`)."""

from __future__ import annotations

import asyncio
import functools
import sys
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from srpo_dsl.lang.usercode.filestate import recording
from srpo_dsl.lsp import lastgood
from srpo_dsl.lsp.chunked import collect
from srpo_dsl.lsp.client_input import ClientInput
from srpo_dsl.lsp.client_output import ClientOutput
from srpo_dsl.lsp.collector import IdleCollector
from srpo_dsl.lsp.completion import completions
from srpo_dsl.lsp.diagnostics import diagnose
from srpo_dsl.lsp.documents import Documents
from srpo_dsl.lsp.fixes import code_actions
from srpo_dsl.lsp.folding import folding_ranges
from srpo_dsl.lsp.formatting import format_edits
from srpo_dsl.lsp.lastgood import behind
from srpo_dsl.lsp.lenses import SHOW_GRAPH, lenses_of, mermaid
from srpo_dsl.lsp.links import document_links
from srpo_dsl.lsp.navigation import definition, hover
from srpo_dsl.lsp.paths import path_completions
from srpo_dsl.lsp.protocol import AnsweringProtocol
from srpo_dsl.lsp.rename import prepare_rename, references, rename
from srpo_dsl.lsp.semantic import LEGEND, encode, in_units, semantic_tokens
from srpo_dsl.lsp.signatures import signature_help
from srpo_dsl.lsp.symbols import document_symbols
from srpo_dsl.lsp.templatedoc import (
    is_template,
    template_completions,
    template_definition,
    template_diagnostics,
    template_hover,
)
from srpo_dsl.lsp.units import Units
from srpo_dsl.lsp.view import View
from srpo_dsl.lsp.watch import OpenWorkflows, offers_watching, registration
from srpo_dsl.lsp.workspace_files import workflows as workspace_workflows
from srpo_dsl.lsp.workspace_symbols import workspace_symbols
from srpo_dsl.version import __version__

server = LanguageServer(
    "srpo-dsl",
    __version__,
    text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
    protocol_cls=AnsweringProtocol,
)
workflows = OpenWorkflows()
documents = Documents()
collector = IdleCollector()


def _path(doc: TextDocument) -> str:
    return doc.path or doc.uri


def publish(ls: LanguageServer, uri: str, if_changed: bool = False) -> None:
    """Check the document as `srpo-dsl validate` would and publish every diagnostic (`if_changed`: only
    when they differ from those last published, or the text is new: a change's analysis may be due);
    keep what requests answer from."""
    doc = ls.workspace.get_text_document(uri)
    text = doc.source
    new = documents.stale(uri, text)
    with recording() as reads:
        if is_template(_path(doc)):
            diags, good = template_diagnostics(text, _path(doc)), None
        else:
            diags, good = diagnose(text, _path(doc))
    documents.record(uri, text, good)
    units = Units(doc)
    for d in diags:
        d.range = units.range(d.range)
    if workflows.analysed(uri, reads, diags) or new or not if_changed:
        ls.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=doc.version)
        )
    collector.analysed()


def _current(ls: LanguageServer, uri: str) -> tuple[TextDocument, View | None]:
    """The document, and what a request on its current text answers from (analysed first if due)."""
    doc = ls.workspace.get_text_document(uri)
    if documents.stale(uri, doc.source):
        publish(ls, uri)
    return doc, documents.view(uri, doc.source)


@server.feature(lsp.INITIALIZED)
def _initialized(ls: LanguageServer, params: lsp.InitializedParams) -> None:
    """Ask the client to report changed templates and Python where it can; start looking at them."""
    if offers_watching(ls.client_capabilities):
        ls.client_register_capability(registration())
    if workflows.poll > 0:
        asyncio.get_running_loop().call_later(workflows.poll, _poll, ls)


def _poll(ls: LanguageServer) -> None:
    """Analyse again each open workflow whose last analysis read a path that changed since; then wait."""
    try:
        for uri in workflows.stale():
            publish(ls, uri, if_changed=True)
    finally:
        asyncio.get_running_loop().call_later(workflows.poll, _poll, ls)


@server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def _files_changed(ls: LanguageServer, params: lsp.DidChangeWatchedFilesParams) -> None:
    for uri in workflows.uris():
        publish(ls, uri)


@server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
def _did_open(ls: LanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
    publish(ls, params.text_document.uri)


@server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
def _did_change(ls: LanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
    documents.changed(params.text_document.uri, functools.partial(publish, ls, params.text_document.uri))


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
def _did_close(ls: LanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
    workflows.forget(params.text_document.uri)
    documents.forget(params.text_document.uri)
    cleared = lsp.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
    ls.text_document_publish_diagnostics(cleared)


@server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
def _formatting(ls: LanguageServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    edits = format_edits(doc.source, _path(doc))
    units = Units(doc)
    for e in edits:
        e.range = units.range(e.range)
    return edits


def _in_units(units: Units, symbols: list[lsp.DocumentSymbol]) -> list[lsp.DocumentSymbol]:
    for s in symbols:
        s.range, s.selection_range = units.range(s.range), units.range(s.selection_range)
        _in_units(units, s.children or [])
    return symbols


@server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
def _symbols(ls: LanguageServer, params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
    doc, view = _current(ls, params.text_document.uri)
    return _in_units(Units(doc), document_symbols(view)) if view is not None else []


@server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
def _definition(ls: LanguageServer, params: lsp.DefinitionParams) -> lsp.Location | None:
    doc, view = _current(ls, params.text_document.uri)
    units = Units(doc)
    if is_template(_path(doc)):
        return template_definition(doc.source, _path(doc), units.from_client(params.position))
    found = definition(view, doc.uri, units.from_client(params.position)) if view is not None else None
    if found is not None and found.uri == doc.uri:
        found.range = units.range(found.range)
    return found


@server.feature(lsp.TEXT_DOCUMENT_HOVER)
def _hover(ls: LanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
    doc, view = _current(ls, params.text_document.uri)
    units = Units(doc)
    if is_template(_path(doc)):
        found = template_hover(doc.source, units.from_client(params.position))
    else:
        found = hover(view, units.from_client(params.position)) if view is not None else None
    if found is not None and found.range is not None:
        found.range = units.range(found.range)
    return found


@server.feature(
    lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=["(", ",", "=", '"', "/", ":"])
)
def _completion(ls: LanguageServer, params: lsp.CompletionParams) -> lsp.CompletionList:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    units = Units(doc)
    pos = units.from_client(params.position)
    line = doc.lines[pos.line] if pos.line < len(doc.lines) else ""
    paths = path_completions(line[: pos.character], _path(doc), is_template(_path(doc)), pos)
    if paths is not None:
        items = paths
        for item in items:
            item.text_edit.range = units.range(item.text_edit.range)
    elif is_template(_path(doc)):
        items = template_completions(doc.source, pos)
    else:
        items = completions(doc.source, pos.line, pos.character)
    return lsp.CompletionList(is_incomplete=False, items=items)


@server.feature(lsp.TEXT_DOCUMENT_SIGNATURE_HELP, lsp.SignatureHelpOptions(trigger_characters=['"', ":"]))
def _signature_help(ls: LanguageServer, params: lsp.SignatureHelpParams) -> lsp.SignatureHelp | None:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    pos = Units(doc).from_client(params.position)
    line = doc.lines[pos.line].rstrip("\r\n") if pos.line < len(doc.lines) else ""
    return signature_help(line, pos.character, _path(doc))


@server.feature(
    lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix])
)
def _code_action(ls: LanguageServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    units = Units(doc)
    at = lsp.Range(start=units.from_client(params.range.start), end=units.from_client(params.range.end))
    actions = code_actions(doc.source, _path(doc), doc.uri, at)
    for action in actions:
        for d in action.diagnostics or []:
            d.range = units.range(d.range)
        for e in (action.edit.changes or {}).get(doc.uri, []) if action.edit else []:
            e.range = units.range(e.range)
    return actions


def _root(ls: LanguageServer) -> Path | None:
    return Path(ls.workspace.root_path) if ls.workspace.root_path else None


def _opened(ls: LanguageServer) -> dict[Path, tuple[str, str]]:
    """Each open document's resolved path -> (uri, text): workspace features read these, not the disk."""
    docs = ls.workspace.text_documents.values()
    return {Path(d.path).resolve(): (d.uri, d.source) for d in docs if d.path}


def _located(ls: LanguageServer, locations: list) -> list:
    """Locations (or symbols holding one) in any workflow, their ranges in the client's units."""
    for item in locations:
        loc = getattr(item, "location", item)
        loc.range = Units(ls.workspace.get_text_document(loc.uri)).range(loc.range)
    return locations


def _read(doc: TextDocument, view: View | None, pos: lsp.Position) -> tuple[str, lsp.Position | None]:
    """The text references and rename read (the last good one while the current has a syntax error),
    and `pos` in it (None: on a line edited since)."""
    old = behind(view, doc.source)
    return (old.good.text, old.at(pos)) if old else (doc.source, pos)


@server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
def _references(ls: LanguageServer, params: lsp.ReferenceParams) -> list[lsp.Location]:
    doc, view = _current(ls, params.text_document.uri)
    text, at = _read(doc, view, Units(doc).from_client(params.position))
    include = params.context.include_declaration
    found = references(text, _path(doc), doc.uri, at, include, _root(ls), _opened(ls)) if at else []
    old = behind(view, doc.source)
    return _located(ls, lastgood.locations(old, found, doc.uri) if old else found)


@server.feature(lsp.WORKSPACE_SYMBOL)
def _workspace_symbols(ls: LanguageServer, params: lsp.WorkspaceSymbolParams) -> list[lsp.SymbolInformation]:
    return _located(ls, workspace_symbols(params.query, workspace_workflows(_root(ls), _opened(ls))))


@server.feature(lsp.TEXT_DOCUMENT_PREPARE_RENAME)
def _prepare_rename(
    ls: LanguageServer, params: lsp.PrepareRenameParams
) -> lsp.PrepareRenamePlaceholder | None:
    doc, view = _current(ls, params.text_document.uri)
    units = Units(doc)
    text, at = _read(doc, view, units.from_client(params.position))
    found = prepare_rename(text, _path(doc), at) if at else None
    old = behind(view, doc.source)
    shown = old.shown(found.range) if old and found else found.range if found else None
    if found is not None and shown is None:
        return None
    if found is not None:
        found.range = units.range(shown)
    return found


def _renames_files(ls: LanguageServer) -> bool:
    edit = ls.client_capabilities.workspace.workspace_edit if ls.client_capabilities.workspace else None
    return lsp.ResourceOperationKind.Rename in ((edit.resource_operations or []) if edit else [])


@server.feature(lsp.TEXT_DOCUMENT_RENAME)
def _rename(ls: LanguageServer, params: lsp.RenameParams) -> lsp.WorkspaceEdit | None:
    """The edit, or an error whose message says why the rename would break a workflow (`rename.Refused`)."""
    doc, view = _current(ls, params.text_document.uri)
    text, at = _read(doc, view, Units(doc).from_client(params.position))
    new, files = params.new_name, _renames_files(ls)
    found = rename(text, _path(doc), doc.uri, at, new, files, _root(ls), _opened(ls)) if at else None
    old = behind(view, doc.source)
    found = lastgood.workspace_edit(old, found, doc.uri) if old else found
    for change in (found.document_changes or []) if found else []:
        units = (
            Units(ls.workspace.get_text_document(change.text_document.uri))
            if hasattr(change, "edits")
            else None
        )
        for e in change.edits if units else []:
            e.range = units.range(e.range)
    for e in (found.changes or {}).get(doc.uri, []) if found else []:
        e.range = Units(doc).range(e.range)
    return found


@server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_LINK)
def _links(ls: LanguageServer, params: lsp.DocumentLinkParams) -> list[lsp.DocumentLink]:
    doc, view = _current(ls, params.text_document.uri)
    units = Units(doc)
    old = behind(view, doc.source)
    links = document_links(old.good.text if old else doc.source, _path(doc))
    links = lastgood.links(old, links) if old else links
    for link in links:
        link.range = units.range(link.range)
    return links


@server.feature(lsp.TEXT_DOCUMENT_FOLDING_RANGE)
def _folding(ls: LanguageServer, params: lsp.FoldingRangeParams) -> list[lsp.FoldingRange]:
    doc, view = _current(ls, params.text_document.uri)
    old = behind(view, doc.source)
    found = folding_ranges(old.good.text if old else doc.source, _path(doc))
    return lastgood.folds(old, found) if old else found


@server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, LEGEND)
async def _semantic(ls: LanguageServer, params: lsp.SemanticTokensParams) -> lsp.SemanticTokens:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    if is_template(_path(doc)):
        return lsp.SemanticTokens(data=[])  # a template's words are not the workflow language's
    units = Units(doc)
    tokens = await collect(in_units(semantic_tokens(doc.source), units))
    return lsp.SemanticTokens(data=encode(tokens))


@server.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
async def _lenses(ls: LanguageServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
    doc, view = _current(ls, params.text_document.uri)
    units = Units(doc)
    lenses = await collect(lenses_of(view))
    for lens in lenses:
        lens.range = units.range(lens.range)
    return lenses


@server.command(SHOW_GRAPH)
def _show_graph(ls: LanguageServer, uri: str) -> str | None:
    """The open workflow's compiled event graph, as Mermaid (None when it does not compile)."""
    doc = ls.workspace.get_text_document(uri)
    return mermaid(doc.source, _path(doc))


def serve(poll: float) -> None:
    """Speak LSP over stdin/stdout until the client says `exit`; every `poll` seconds (0: never), look
    whether the files the open workflows read changed."""
    workflows.poll = poll
    collector.start()
    server.start_io(stdin=ClientInput(sys.stdin.buffer), stdout=ClientOutput(sys.stdout.buffer))
