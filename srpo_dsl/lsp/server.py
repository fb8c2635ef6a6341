"""The pygls server: each LSP method calls its feature module on the document's text and path; the
diagnostics of open workflows are published again when the files they read change (`watch`)."""

from __future__ import annotations

import asyncio

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from srpo_dsl.lang.filestate import recording
from srpo_dsl.lsp.completion import completions
from srpo_dsl.lsp.diagnostics import diagnose
from srpo_dsl.lsp.fixes import code_actions
from srpo_dsl.lsp.folding import folding_ranges
from srpo_dsl.lsp.formatting import format_edits
from srpo_dsl.lsp.lenses import SHOW_GRAPH, code_lenses, mermaid
from srpo_dsl.lsp.links import document_links
from srpo_dsl.lsp.navigation import definition, hover
from srpo_dsl.lsp.rename import prepare_rename, references, rename
from srpo_dsl.lsp.semantic import LEGEND, encode, semantic_ranges
from srpo_dsl.lsp.symbols import document_symbols
from srpo_dsl.lsp.watch import OpenWorkflows, offers_watching, registration
from srpo_dsl.version import __version__

server = LanguageServer("srpo-dsl", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
workflows = OpenWorkflows()


def _path(doc: TextDocument) -> str:
    return doc.path or doc.uri


def _client(doc: TextDocument, rng: lsp.Range) -> lsp.Range:
    """A range in code points as the client counts (UTF-16 by default)."""
    return doc.position_codec.range_to_client_units(doc.lines, rng)


def _at(doc: TextDocument, pos: lsp.Position) -> lsp.Position:
    return doc.position_codec.position_from_client_units(doc.lines, pos)


def publish(ls: LanguageServer, uri: str, if_changed: bool = False) -> None:
    """Check the document as `srpo-dsl validate` would and publish every diagnostic (`if_changed`: only
    when they differ from those last published)."""
    doc = ls.workspace.get_text_document(uri)
    with recording() as reads:
        diags = diagnose(doc.source, _path(doc))
    for d in diags:
        d.range = _client(doc, d.range)
    if workflows.analysed(uri, reads, diags) or not if_changed:
        ls.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=doc.version)
        )


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
    publish(ls, params.text_document.uri)


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
def _did_close(ls: LanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
    workflows.forget(params.text_document.uri)
    cleared = lsp.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
    ls.text_document_publish_diagnostics(cleared)


@server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
def _formatting(ls: LanguageServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    edits = format_edits(doc.source, _path(doc))
    for e in edits:
        e.range = _client(doc, e.range)
    return edits


def _fix_symbols(doc: TextDocument, symbols: list[lsp.DocumentSymbol]) -> list[lsp.DocumentSymbol]:
    for s in symbols:
        s.range, s.selection_range = _client(doc, s.range), _client(doc, s.selection_range)
        _fix_symbols(doc, s.children or [])
    return symbols


@server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
def _symbols(ls: LanguageServer, params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    return _fix_symbols(doc, document_symbols(doc.source, _path(doc)))


@server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
def _definition(ls: LanguageServer, params: lsp.DefinitionParams) -> lsp.Location | None:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    found = definition(doc.source, _path(doc), doc.uri, _at(doc, params.position))
    if found is not None and found.uri == doc.uri:
        found.range = _client(doc, found.range)
    return found


@server.feature(lsp.TEXT_DOCUMENT_HOVER)
def _hover(ls: LanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    found = hover(doc.source, _path(doc), _at(doc, params.position))
    if found is not None and found.range is not None:
        found.range = _client(doc, found.range)
    return found


@server.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=["(", ",", "="]))
def _completion(ls: LanguageServer, params: lsp.CompletionParams) -> lsp.CompletionList:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    pos = _at(doc, params.position)
    return lsp.CompletionList(is_incomplete=False, items=completions(doc.source, pos.line, pos.character))


@server.feature(
    lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix])
)
def _code_action(ls: LanguageServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    at = lsp.Range(start=_at(doc, params.range.start), end=_at(doc, params.range.end))
    actions = code_actions(doc.source, _path(doc), doc.uri, at)
    for action in actions:
        for d in action.diagnostics or []:
            d.range = _client(doc, d.range)
        for e in (action.edit.changes or {}).get(doc.uri, []) if action.edit else []:
            e.range = _client(doc, e.range)
    return actions


@server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
def _references(ls: LanguageServer, params: lsp.ReferenceParams) -> list[lsp.Location]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    found = references(
        doc.source, _path(doc), doc.uri, _at(doc, params.position), params.context.include_declaration
    )
    for loc in found:
        loc.range = _client(doc, loc.range)
    return found


@server.feature(lsp.TEXT_DOCUMENT_PREPARE_RENAME)
def _prepare_rename(
    ls: LanguageServer, params: lsp.PrepareRenameParams
) -> lsp.PrepareRenamePlaceholder | None:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    found = prepare_rename(doc.source, _path(doc), _at(doc, params.position))
    if found is not None:
        found.range = _client(doc, found.range)
    return found


def _renames_files(ls: LanguageServer) -> bool:
    edit = ls.client_capabilities.workspace.workspace_edit if ls.client_capabilities.workspace else None
    return lsp.ResourceOperationKind.Rename in ((edit.resource_operations or []) if edit else [])


@server.feature(lsp.TEXT_DOCUMENT_RENAME)
def _rename(ls: LanguageServer, params: lsp.RenameParams) -> lsp.WorkspaceEdit | None:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    found = rename(
        doc.source, _path(doc), doc.uri, _at(doc, params.position), params.new_name, _renames_files(ls)
    )
    for change in (found.document_changes or []) if found else []:
        for e in change.edits if isinstance(change, lsp.TextDocumentEdit) else []:
            e.range = _client(doc, e.range)
    for e in (found.changes or {}).get(doc.uri, []) if found else []:
        e.range = _client(doc, e.range)
    return found


@server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_LINK)
def _links(ls: LanguageServer, params: lsp.DocumentLinkParams) -> list[lsp.DocumentLink]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    links = document_links(doc.source, _path(doc))
    for link in links:
        link.range = _client(doc, link.range)
    return links


@server.feature(lsp.TEXT_DOCUMENT_FOLDING_RANGE)
def _folding(ls: LanguageServer, params: lsp.FoldingRangeParams) -> list[lsp.FoldingRange]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    return folding_ranges(doc.source, _path(doc))


@server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, LEGEND)
def _semantic(ls: LanguageServer, params: lsp.SemanticTokensParams) -> lsp.SemanticTokens:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    ranges = [(_client(doc, rng), kind) for rng, kind in semantic_ranges(doc.source)]
    return lsp.SemanticTokens(data=encode(ranges))


@server.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
def _lenses(ls: LanguageServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
    doc = ls.workspace.get_text_document(params.text_document.uri)
    lenses = code_lenses(doc.source, _path(doc))
    for lens in lenses:
        lens.range = _client(doc, lens.range)
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
    server.start_io()
