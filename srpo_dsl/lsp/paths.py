"""Completion inside a string: template files after `prompt "` (and `include "` in a template), the
functions of a `"file.py:` reference (read with `ast`, never imported), else the Python files beside
the workflow. Paths are relative to the workflow's folder, as the checker reads them."""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp

from srpo_dsl.lang.pycode import read_module, split_ref, top_level
from srpo_dsl.lang.pysource import RefProblem, source_of
from srpo_dsl.lsp.files import TEMPLATE_SUFFIXES, files_under

CK = lsp.CompletionItemKind
_TEMPLATE_BEFORE = re.compile(r"""(?:\bprompt|\bobserve\s*=|\b(?:include|import|from|extends))\s*["']$""")
# What the text before a reference's opening quote says it is for (a key of `USES`).
_USE_BEFORE = (
    (re.compile(r"\breward\s*$"), "reward"),
    (re.compile(r"\bemits\s*$"), "parser"),
    (re.compile(r"\bby\s*$"), "scorer"),
    (re.compile(r"^\s*tool\s+\w+\s*=\s*$"), "tool"),
    (re.compile(r"^\s*env\s+\w+\s*=\s*$"), "env"),
    (re.compile(r"^\s*task\s*$"), "loader"),
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


def path_completions(line_before: str, path: str, template: bool) -> list[lsp.CompletionItem] | None:
    """The completions for a cursor in a string (None when it is not in one); `template`: the document
    is a template (only `include` paths are completed)."""
    found = open_string(line_before)
    if found is None:
        return None
    opener, written = found
    folder = Path(path).resolve().parent
    if _TEMPLATE_BEFORE.search(opener):
        return [lsp.CompletionItem(label=t, kind=CK.File) for t in files_under(folder, TEMPLATE_SUFFIXES)]
    if template:
        return []
    if ":" in written:
        module = written.rsplit(":", 1)[0]
        return [lsp.CompletionItem(label=f, kind=CK.Function) for f in functions_of(module, folder)]
    if hook_use(opener) is None:
        return []
    return [
        lsp.CompletionItem(label=f"{p}:", kind=CK.File, insert_text=f"{p}:") for p in python_files(folder)
    ]
