"""Diagnostics of a document: the ones `srpo-dsl validate` prints, from the same `analyze`."""

from __future__ import annotations

from lsprotocol import types as lsp

from srpo_dsl.lang import analyze
from srpo_dsl.lang.messages import Diagnostic
from srpo_dsl.lsp.positions import span_range

SOURCE = "srpo-dsl"

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


def diagnose(text: str, path: str) -> list[lsp.Diagnostic]:
    """What `validate` reports for `text` read from `path` (relative paths resolve from its folder)."""
    return [to_lsp(d) for d in analyze(text, path).diagnostics]
