"""A prompt template (`.j2`, `.jinja`, `.jinja2`) open in the editor: its diagnostics (the checker's
E080/E081/E082, at their lines), hover, completion and definition of the variables every workflow's
executor passes (`TEMPLATE_VARIABLES`), and definition of `{% include "x.j2" %}`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jinja2
from lsprotocol import types as lsp

from srpo_dsl.lang.checks.schema import TEMPLATE_VARIABLES
from srpo_dsl.lang.checks.templates import TemplateLoader, template_text_problems
from srpo_dsl.lsp.diagnostics import SOURCE
from srpo_dsl.lsp.files import TEMPLATE_SUFFIXES
from srpo_dsl.lsp.template_includes import INCLUDE_TAG

CK = lsp.CompletionItemKind
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPEN = re.compile(r"\{\{|\{%")
_CLOSE = re.compile(r"\}\}|%\}")
_LEVELS = 2  # an include is looked up in the template's folder and this many folders above it
EPISODE = Path(__file__).resolve().parents[1] / "runtime" / "episode.py"  # where the executor sets them


def is_template(path: str) -> bool:
    return Path(path).suffix in TEMPLATE_SUFFIXES


def search_dirs(path: str) -> list[Path]:
    """Where a template's includes are looked up from the editor: its folder and the folders above it
    (a workflow names its templates from its own folder, which may be one of these)."""
    here = Path(path).resolve().parent
    return [here, *list(here.parents)[:_LEVELS]]


def template_diagnostics(text: str, path: str) -> list[lsp.Diagnostic]:
    """The checker's problems with the template's text, each on its line."""
    out = []
    for code, message, hint, line in template_text_problems(Path(path).name, text, search_dirs(path)):
        row = max(line - 1, 0)
        width = len(text.split("\n")[row]) if row < text.count("\n") + 1 else 0
        rng = lsp.Range(
            start=lsp.Position(line=row, character=0), end=lsp.Position(line=row, character=width)
        )
        full = message + (f"\nhint: {hint}" if hint else "")
        out.append(
            lsp.Diagnostic(
                range=rng, message=full, code=code, severity=lsp.DiagnosticSeverity.Error, source=SOURCE
            )
        )
    return out


def variable_doc(name: str) -> str:
    var = TEMPLATE_VARIABLES[name]
    return f"**{name}**: `{var.type}`\n\n{var.doc}"


def _word_at(line: str, character: int) -> tuple[str, int, int] | None:
    for m in _WORD.finditer(line):
        if m.start() <= character <= m.end():
            return m.group(), m.start(), m.end()
    return None


def _include_at(line: str, character: int) -> str | None:
    for m in INCLUDE_TAG.finditer(line):
        if m.start(2) <= character <= m.end(2):
            return m.group(2)
    return None


def _in_code(before: str) -> bool:
    """Whether the text before the cursor leaves it inside `{{ ... }}` or `{% ... %}`."""
    opened = [m.end() for m in _OPEN.finditer(before)]
    return bool(opened) and not _CLOSE.search(before, opened[-1])


def _line(text: str, pos: lsp.Position) -> str:
    lines = text.split("\n")
    return lines[pos.line] if pos.line < len(lines) else ""


def _before(text: str, pos: lsp.Position) -> str:
    return "\n".join([*text.split("\n")[: pos.line], _line(text, pos)[: pos.character]])


def _variable_at(text: str, pos: lsp.Position) -> tuple[str, int, int] | None:
    """The context variable under `pos` inside `{{ }}` or `{% %}` (plain text names none), and its
    columns."""
    found = _word_at(_line(text, pos), pos.character)
    if found is None or found[0] not in TEMPLATE_VARIABLES:
        return None
    return found if _in_code(_before(text, lsp.Position(line=pos.line, character=found[1]))) else None


def template_hover(text: str, pos: lsp.Position) -> lsp.Hover | None:
    """A context variable's type and documentation."""
    found = _variable_at(text, pos)
    if found is None:
        return None
    rng = lsp.Range(
        start=lsp.Position(line=pos.line, character=found[1]),
        end=lsp.Position(line=pos.line, character=found[2]),
    )
    value = lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=variable_doc(found[0]))
    return lsp.Hover(contents=value, range=rng)


def variable_items() -> list[lsp.CompletionItem]:
    """Every context variable, with its type and documentation."""
    return [
        lsp.CompletionItem(
            label=name,
            kind=CK.Variable,
            detail=var.type,
            documentation=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=var.doc),
        )
        for name, var in TEMPLATE_VARIABLES.items()
    ]


def template_completions(text: str, pos: lsp.Position) -> list[lsp.CompletionItem]:
    """Inside `{{ }}` or `{% %}`, the context variables."""
    return variable_items() if _in_code(_before(text, pos)) else []


def _variable_line(name: str) -> int:
    """The 0-based line of the `"name":` key in the executor's `Episode.context` (read with `ast`)."""
    tree = ast.parse(EPISODE.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "context":
            for key in (k for d in ast.walk(node) if isinstance(d, ast.Dict) for k in d.keys):
                if isinstance(key, ast.Constant) and key.value == name:
                    return key.lineno - 1
    return 0


def template_definition(text: str, path: str, pos: lsp.Position) -> lsp.Location | None:
    """An included template's file; a context variable's place in the executor's `Episode.context`."""
    line = _line(text, pos)
    included = _include_at(line, pos.character)
    if included is not None:
        try:
            return _at(TemplateLoader(search_dirs(path)).find(included).resolve(), 0)
        except jinja2.TemplateError:
            return None
    found = _variable_at(text, pos)
    return _at(EPISODE, _variable_line(found[0])) if found is not None else None


def _at(path: Path, line: int) -> lsp.Location:
    start = lsp.Position(line=line, character=0)
    return lsp.Location(uri=path.as_uri(), range=lsp.Range(start=start, end=start))
