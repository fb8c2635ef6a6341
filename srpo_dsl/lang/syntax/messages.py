"""Source spans, diagnostics, the compiler's error (`SrpoError`) and the API's (`WorkflowError`), and how
diagnostics render (pretty, GitHub annotations, JSON)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from srpo_dsl.errors import InputError, UsageError
from srpo_dsl.io import read_text
from srpo_dsl.jsonvalue import JsonObject

Severity = Literal["error", "warning"]

BOM = "\ufeff"


def without_bom(text: str) -> str:
    """The text an editor shows: without the byte-order mark some editors (Windows) write first."""
    return text[1:] if text.startswith(BOM) else text


@dataclass(frozen=True)
class Span:
    """A region of a source file; lines and columns are 1-based, `end_col` exclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    """One message of the compiler, anchored at a span."""

    code: str
    message: str
    span: Span
    hint: str | None = None
    severity: Severity = "error"

    def to_dict(self) -> JsonObject:
        return {
            "file": self.span.file,
            "line": self.span.line,
            "col": self.span.col,
            "end_line": self.span.end_line,
            "end_col": self.span.end_col,
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "hint": self.hint,
        }


@dataclass
class SrpoError(Exception):
    """Raised with every diagnostic found; the only exception the front end lets escape."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(f"{d.span}: {d.severity}[{d.code}]: {d.message}" for d in self.diagnostics)


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A hint naming the closest candidate, if any is close."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None


def source_lines(source: str | None) -> list[str]:
    """The lines diagnostics point into (columns count from after a byte-order mark); [] for no source."""
    return without_bom(source).splitlines() if source is not None else []


def render_all(diags: Iterable[Diagnostic], source: str | None) -> Iterator[str]:
    """`render_pretty` of each diagnostic, the source split once: time linear in their count."""
    lines = source_lines(source)
    return (render_pretty(d, lines) for d in diags)


def render_pretty(diag: Diagnostic, source: str | Sequence[str] | None) -> str:
    """`FILE:LINE:COL: error[CODE]: message`, the source line, a caret underline, the hint. `source`: the
    text, or its `source_lines` (for many diagnostics of one file: `render_all`)."""
    out = [f"{diag.span}: {diag.severity}[{diag.code}]: {diag.message}"]
    lines = source_lines(source) if source is None or isinstance(source, str) else source
    if 1 <= diag.span.line <= len(lines):
        text = lines[diag.span.line - 1].expandtabs(1)
        gutter = f"{diag.span.line:>4} | "
        width = (diag.span.end_col - diag.span.col) if diag.span.end_line == diag.span.line else 1
        width = max(1, min(width, len(text) - diag.span.col + 1))
        out.append(gutter + text)
        out.append(" " * (len(gutter) + diag.span.col - 1) + "^" * width)
    if diag.hint:
        out.append(f"     = hint: {diag.hint}")
    return "\n".join(out)


def render_github(diag: Diagnostic) -> str:
    """A GitHub Actions workflow command that annotates the line in a pull request."""
    level = "error" if diag.severity == "error" else "warning"
    msg = diag.message + (f" ({diag.hint})" if diag.hint else "")
    msg = msg.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return (
        f"::{level} file={diag.span.file},line={diag.span.line},col={diag.span.col},"
        f"endLine={diag.span.end_line},endColumn={diag.span.end_col},title={diag.code}::{msg}"
    )


def render_json(diags: Sequence[Diagnostic]) -> str:
    return json.dumps([d.to_dict() for d in diags], indent=2)


__all__ = [
    "BOM",
    "Diagnostic",
    "Severity",
    "Span",
    "SrpoError",
    "WorkflowError",
    "did_you_mean",
    "render_all",
    "render_github",
    "render_json",
    "render_pretty",
    "without_bom",
]


class WorkflowError(InputError):
    """A workflow that does not compile. The message is its first error, `FILE:LINE:COL: error[CODE]: ...`;
    `diagnostics` holds every diagnostic (warnings too), `render()` the errors as `validate` prints them."""

    def __init__(self, path: Path, diagnostics: Sequence[Diagnostic], source: str | None = None):
        self.path, self.diagnostics, self.source = Path(path), list(diagnostics), source
        first = self.errors[0]
        super().__init__(f"{first.span}: {first.severity}[{first.code}]: {first.message}")

    @classmethod
    def of(cls, path: Path, diagnostics: Sequence[Diagnostic]) -> WorkflowError:
        """The error of the file at `path`, its source read again to show (None when it cannot be)."""
        try:
            source: str | None = read_text(path)
        except UsageError:
            source = None
        return cls(path, diagnostics, source)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"] or self.diagnostics

    def render(self) -> str:
        """Every error with its source line, a caret and its hint."""
        return "\n\n".join(render_all(self.errors, self.source))
