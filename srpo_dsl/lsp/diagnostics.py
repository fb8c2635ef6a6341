"""Diagnostics of a document: the ones `srpo-dsl validate` prints, from the same `analyze`; and the
syntax tree and graph it made, for the requests."""

from __future__ import annotations

import logging

from lsprotocol import types as lsp

from srpo_dsl.lang import analyze
from srpo_dsl.lang.syntax.messages import Diagnostic
from srpo_dsl.lsp.positions import span_range
from srpo_dsl.lsp.view import Good

SOURCE = "srpo-dsl"
logger = logging.getLogger(__name__)

_SEVERITY = {"error": lsp.DiagnosticSeverity.Error, "warning": lsp.DiagnosticSeverity.Warning}


def to_lsp(diag: Diagnostic) -> lsp.Diagnostic:
    """One checker diagnostic as LSP's: its code, range and severity; the hint after the message."""
    message = diag.message + (f"\nhint: {diag.hint}" if diag.hint else "")
    return lsp.Diagnostic(
        range=span_range(diag.span),
        message=message,
        severity=_SEVERITY[diag.severity],
        code=diag.code,
        source=SOURCE,
    )


def diagnose(text: str, path: str) -> tuple[list[lsp.Diagnostic], Good | None]:
    """What `validate` reports for `text` read from `path` (relative paths resolve from its folder),
    and what requests may answer from when it parses."""
    try:
        result = analyze(text, path)
    except Exception as exc:  # a bug: say so in place of the diagnostics rather than leave stale ones
        logger.exception("analysis of %s failed", path)
        return [_failed(exc)], None
    good = Good(text, result.tree, result.program) if result.tree is not None else None
    return [to_lsp(d) for d in result.diagnostics], good


def _failed(exc: Exception) -> lsp.Diagnostic:
    return lsp.Diagnostic(
        range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0)),
        message=f"srpo-dsl could not analyse this file ({type(exc).__name__}: {exc}): a bug, please "
        "report it with the server's log",
        severity=lsp.DiagnosticSeverity.Error,
        source=SOURCE,
    )
