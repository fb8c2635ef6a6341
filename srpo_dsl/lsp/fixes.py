"""textDocument/codeAction: quick fixes for the diagnostics at a range.

- a "did you mean `X`?" hint: the name its message is about becomes X;
- E080 (a prompt template not found): the prompt becomes the template file nearest its path;
- an undefined agent, policy, tool or environment (E011 to E014): a declaration skeleton for it,
  after the file's last declaration.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from pathlib import Path

from lsprotocol import types as lsp

from srpo_dsl.lang import analyze
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Diagnostic, Span
from srpo_dsl.lsp.diagnostics import to_lsp
from srpo_dsl.lsp.files import TEMPLATE_SUFFIXES, files_under
from srpo_dsl.lsp.positions import span_range
from srpo_dsl.lsp.symbols import parsed

_HINT = re.compile(r"did you mean `([^`]+)`\?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAMED = re.compile(r"`([^`]+)`")


_UNDEFINED = ("E011", "E012", "E013", "E014")  # an undefined policy, agent, tool, environment


def _skeleton(kind: str, name: str, program: n.Program) -> str:
    policy = program.policies[0].name.name if program.policies else "lm"
    return {
        "E011": f'policy {name} = hf("MODEL")',
        "E012": f'agent {name} uses {policy} prompt "{name}.j2" emits boxed',
        "E013": f'tool {name} = bm25(corpus = "corpus.jsonl")',
        "E014": f'env {name} = "{name}.py:step"()',
    }[kind]


def _text(lines: list[str], span: Span) -> str | None:
    """The text of a one-line span (None for a longer one)."""
    if span.line != span.end_line or span.line > len(lines):
        return None
    return lines[span.line - 1][span.col - 1 : span.end_col - 1]


def _action(title: str, uri: str, diag: Diagnostic, edit: lsp.TextEdit, preferred: bool) -> lsp.CodeAction:
    return lsp.CodeAction(
        title=title,
        kind=lsp.CodeActionKind.QuickFix,
        diagnostics=[to_lsp(diag)],
        edit=lsp.WorkspaceEdit(changes={uri: [edit]}),
        is_preferred=preferred,
    )


def _replace(span: Span, start: int, end: int, new: str) -> lsp.TextEdit:
    """An edit of columns [start, end) (0-based, in the span's line) to `new`."""
    line = span.line - 1
    at = lsp.Range(start=lsp.Position(line=line, character=start), end=lsp.Position(line=line, character=end))
    return lsp.TextEdit(range=at, new_text=new)


def _did_you_mean(diag: Diagnostic, lines: list[str], uri: str) -> Iterator[lsp.CodeAction]:
    """The word of the span that the message names in backticks (the span may hold more: `max_token = 5`)
    becomes the hint's name; no fix where the span does not hold it (a name in a template file)."""
    hint = _HINT.search(diag.hint or "")
    named = set(_NAMED.findall(diag.message))
    words = [m for m in _WORD.finditer(_text(lines, diag.span) or "") if m.group() in named]
    if hint is None or not words:
        return
    new, word = hint.group(1), words[0]
    start = diag.span.col - 1 + word.start()
    edit = _replace(diag.span, start, start + len(word.group()), new)
    yield _action(f"Change `{word.group()}` to `{new}`", uri, diag, edit, True)


def templates_under(folder: Path) -> list[str]:
    """The template files under `folder` (not in hidden folders), as paths relative to it."""
    return files_under(folder, TEMPLATE_SUFFIXES)


def _nearest_template(diag: Diagnostic, lines: list[str], uri: str, path: str) -> Iterator[lsp.CodeAction]:
    written = _text(lines, diag.span)
    if diag.message != "template not found" or not written or not written.startswith('"'):
        return
    name = written.strip('"')
    candidates = [t for t in templates_under(Path(path).resolve().parent) if t != name]
    if not candidates:
        return
    best = max(candidates, key=lambda t: difflib.SequenceMatcher(None, t, name).ratio())
    edit = _replace(diag.span, diag.span.col - 1, diag.span.end_col - 1, f'"{best}"')
    yield _action(f'Use the template "{best}"', uri, diag, edit, True)


def _declare(
    diag: Diagnostic, lines: list[str], uri: str, program: n.Program | None
) -> Iterator[lsp.CodeAction]:
    name = _text(lines, diag.span)
    if diag.code not in _UNDEFINED or program is None or not name or not _WORD.fullmatch(name):
        return
    decls = [*program.policies, *program.tasks, *program.tools, *program.envs, *program.agents]
    last = max((d.span.end_line for d in decls), default=program.name.span.end_line)
    at = lsp.Position(line=last - 1, character=len(lines[last - 1]))
    edit = lsp.TextEdit(
        range=lsp.Range(start=at, end=at), new_text="\n" + _skeleton(diag.code, name, program)
    )
    yield _action(f"Declare `{name}`", uri, diag, edit, False)


def _overlaps(a: lsp.Range, b: lsp.Range) -> bool:
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (
        b.start.line,
        b.start.character,
    ) <= (a.end.line, a.end.character)


def code_actions(text: str, path: str, uri: str, at: lsp.Range) -> list[lsp.CodeAction]:
    """The quick fixes of the diagnostics (as `validate` finds them) whose range meets `at`."""
    lines = text.split("\n")
    program = None
    actions: list[lsp.CodeAction] = []
    for diag in analyze(text, path).diagnostics:
        if not _overlaps(span_range(diag.span), at):
            continue
        if diag.code in _UNDEFINED and program is None:
            program = parsed(text, path)
        actions += [
            *_did_you_mean(diag, lines, uri),
            *_nearest_template(diag, lines, uri, path),
            *_declare(diag, lines, uri, program),
        ]
    return actions
