"""Completion inside a string: template files after `prompt "` (and `include "` in a template), the
functions of a `"file.py:` reference (read with `ast`, never imported), else the Python files beside
the workflow. Paths are relative to the workflow's folder, as the checker reads them."""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp

from srpo_dsl.lang.checks.option_checks import CODE_USES
from srpo_dsl.lang.usercode.pycode import read_module, split_ref, top_level
from srpo_dsl.lang.usercode.pysource import RefProblem, source_of
from srpo_dsl.lsp.files import TEMPLATE_SUFFIXES, files_under

CK = lsp.CompletionItemKind
_TEMPLATE_BEFORE = re.compile(r"""(?:\bprompt|\bobserve\s*=|\b(?:include|import|from|extends))\s*["']$""")
# What the text before a reference's opening quote says it is for (a key of `USES`): a declaration
# whose binding is code (`tool NAME = "`, `task "`), then the places that name a function.
_USE_BEFORE = (
    *((re.compile(rf"^\s*{word}(\s+\w+\s*=)?\s*$"), use) for word, use in CODE_USES.items()),
    (re.compile(r"\breward\s*$"), "reward"),
    (re.compile(r"\bemits\s*$"), "parser"),
    (re.compile(r"\bby\s*$"), "scorer"),
    (re.compile(r"\bobjective\s*=\s*$"), "objective"),
    (re.compile(r"\badvantage\s*=\s*$"), "advantage"),
)


def open_string(before: str) -> tuple[str, str] | None:
    """(the text before the string's opening quote, what the string holds so far) when a cursor after
    `before` (its line up to it) is inside a string; None elsewhere."""
    start, quote = None, ""
    for i, ch in enumerate(before):
        if start is None and ch in "\"'":
            start, quote = i, ch
        elif start is not None and ch == quote:
            start = None
    return (before[: start + 1], before[start + 1 :]) if start is not None else None


def hook_use(opener: str) -> str | None:
    """The hook kind a reference after `opener` (its line up to the quote) is called as."""
    before = opener[:-1]
    return next((use for pattern, use in _USE_BEFORE if pattern.search(before)), None)


def python_files(folder: Path) -> list[str]:
    """The `.py` files under `folder` (not in hidden folders), relative to it."""
    return files_under(folder, (".py",))


def functions_of(ref: str, folder: Path) -> list[str]:
    """The top-level functions of the module a `"where:"` reference names (none if it cannot be read)."""
    try:
        where, _ = split_ref(ref + ":f")
        path, _ = source_of(where, folder)
        return sorted(top_level(read_module(path)).defs)
    except (RefProblem, OSError, SyntaxError, ValueError):
        return []


def _items(names: list[str], kind: lsp.CompletionItemKind, at: lsp.Position, start: int) -> list:
    """Completion items that replace the string's text from `start` to the cursor `at` (a path's `/`
    and `.` do not end the word a client would replace)."""
    rng = lsp.Range(start=lsp.Position(line=at.line, character=start), end=at)
    return [
        lsp.CompletionItem(label=x, kind=kind, text_edit=lsp.TextEdit(range=rng, new_text=x)) for x in names
    ]


def _choices(
    opener: str, written: str, folder: Path, template: bool
) -> tuple[list[str], lsp.CompletionItemKind, int]:
    """The names that fit, their kind, and where in the string's text they start."""
    if _TEMPLATE_BEFORE.search(opener):
        return files_under(folder, TEMPLATE_SUFFIXES), CK.File, 0
    if template or (":" not in written and hook_use(opener) is None):
        return [], CK.File, 0
    if ":" in written:
        module = written.rsplit(":", 1)[0]
        return functions_of(module, folder), CK.Function, len(module) + 1
    return [f"{p}:" for p in python_files(folder)], CK.File, 0


def path_completions(line_before: str, path: str, template: bool, at: lsp.Position) -> list | None:
    """The completions for a cursor `at` in a string (None when it is not in one); `line_before`: its
    line up to the cursor; `template`: the document is a template (only `include` paths complete)."""
    found = open_string(line_before)
    if found is None:
        return None
    opener, written = found
    names, kind, start = _choices(opener, written, Path(path).resolve().parent, template)
    return _items(names, kind, at, len(opener) + start)
