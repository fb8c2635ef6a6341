"""How deep blocks may nest: a limit every pass over the steps can rely on.

The checker, the compiler, the formatter and the language server walk the steps recursively (a
loop's body, then what is in it); Python stops a recursion about a thousand frames deep. `parse`
therefore refuses a workflow whose blocks nest deeper than `MAX_NESTING` with one diagnostic (E008),
found here without recursion, so no pass ever meets a deeper tree. Text with a syntax error is read
by Lark's own pipeline, which recurses as deep as the text nests: its tokens are measured first
(`too_deep_tokens`), so a deep workflow with a syntax error gets the same E008.
"""

from __future__ import annotations

from collections.abc import Iterable

from lark import Token

from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.lexer import token_span
from srpo_dsl.lang.syntax.messages import Diagnostic, Span

# Far more than any workflow needs (the shipped ones nest 3 deep), far less than the recursion limit.
MAX_NESTING = 64


def too_deep(steps: tuple[n.Step, ...]) -> Diagnostic | None:
    """E008 at the keyword of the first block (in program order) that is nested deeper than
    `MAX_NESTING`, else None."""
    todo = [(step, 1) for step in reversed(steps) if step.blocks]
    while todo:
        step, depth = todo.pop()
        if depth > MAX_NESTING:
            return _diagnostic(_keyword(step))
        inner = [x for block in step.blocks for x in block if x.blocks]
        todo += [(x, depth + 1) for x in reversed(inner)]
    return None


def too_deep_tokens(tokens: Iterable[Token], file: str) -> Diagnostic | None:
    """E008 at the keyword of the first block whose `{` opens deeper than `MAX_NESTING`, counting the
    braces of the tokens (of text that may not parse), else None."""
    depth, keyword = 0, None
    for tok in tokens:
        if tok.type in ("REPEAT", "IF"):
            keyword = tok
        elif tok.type == "LBRACE":
            depth += 1
            if depth > MAX_NESTING:
                at = keyword or tok
                start = token_span(file, at)
                return _diagnostic(Span(file, start.line, start.col, start.line, start.col + len(at)))
        elif tok.type == "RBRACE":
            depth = max(depth - 1, 0)
    return None


def _diagnostic(at: Span) -> Diagnostic:
    return Diagnostic(
        "E008",
        f"blocks nested more than {MAX_NESTING} deep",
        at,
        f"at most {MAX_NESTING} levels of `repeat` and `if` blocks, one inside the other",
    )


def _keyword(step: n.Step) -> Span:
    s, word = step.span, "repeat" if isinstance(step, n.Repeat) else "if"
    return Span(s.file, s.line, s.col, s.line, s.col + len(word))
