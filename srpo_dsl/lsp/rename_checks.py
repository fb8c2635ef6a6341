"""Why a rename is refused: each check says, in one line, what the new name would break.

A declared name (agent, policy, tool, environment) must stay a name that means one thing: it must be
a name of the language's syntax, not a keyword, not already declared (one namespace: E010), not a
built-in that a reward or a branch's scorer resolves to, and not already written elsewhere in the
workflow (an action, a verdict word, a pool, a field: a word that would then read as the renamed
declaration, or would stop meaning what it meant). A template path must be a relative path a
template loader can find, of a file that does not exist yet.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.grammar import keywords
from srpo_dsl.lsp.occurrences import declarations
from srpo_dsl.registries import REWARDS

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PATH = re.compile(r'[^"\\\n]+')
_HIDDEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*')  # strings and comments: their words name nothing


def _written(source: str, name: str, skip: str) -> int | None:
    """The first line on which `name` is written as a word outside strings and comments (None: nowhere);
    `skip`: the name being renamed, whose own places are no conflict."""
    if name == skip:
        return None
    bare = _HIDDEN.sub(lambda m: " " * len(m.group()), source)
    found = re.search(rf"(?<![A-Za-z0-9_.]){re.escape(name)}(?![A-Za-z0-9_])", bare)
    return bare.count("\n", 0, found.start()) + 1 if found else None


def name_refusal(kind: str, old: str, new: str, program: n.Program) -> str | None:
    """Why the declared `old` (a `kind`) cannot become `new`, in one line; None when it can."""
    if not _IDENT.fullmatch(new):
        return f"`{new}` is not a name: a name is a letter or `_`, then letters, digits or `_`"
    if new in keywords():
        return f"`{new}` is a keyword of the language: it cannot name a {kind}"
    for what, decls in declarations(program).items():
        if new in decls and new != old:
            line = decls[new].name.span.line
            return f"`{new}` is already declared (the {what} on line {line}): names are declared once (E010)"
    if new in REWARDS:
        return f"`{new}` is a built-in reward: `reward {new}` and `by {new}` would change meaning"
    line = _written(program.source, new, old)
    if line is not None:
        return f"`{new}` is already written on line {line}: it would then name the renamed {kind}"
    return None


def path_refusal(new: str) -> str | None:
    """Why `new` cannot be a template's path (as a prompt names it), in one line; None when it can."""
    parts = PurePosixPath(new).parts
    if not _PATH.fullmatch(new) or new != new.strip() or not parts:
        return f'"{new}" is not a template path: a relative path without quotes or line breaks'
    if PurePosixPath(new).is_absolute() or ".." in parts or "\\" in new:
        return f'"{new}" is not a template path: templates are found by a relative path, without ".."'
    return None
