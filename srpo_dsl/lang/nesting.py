"""How deep blocks may nest: a limit every pass over the steps can rely on.

The checker, the compiler, the formatter and the language server walk the steps recursively (a
loop's body, then what is in it); Python stops a recursion about a thousand frames deep. `parse`
therefore refuses a workflow whose blocks nest deeper than `MAX_NESTING` with one diagnostic (E008),
found here without recursion, so no pass ever meets a deeper tree.
"""

from __future__ import annotations

from srpo_dsl.lang import nodes as n
from srpo_dsl.lang.messages import Diagnostic, Span

# Far more than any workflow needs (the shipped ones nest 3 deep), far less than the recursion limit.
MAX_NESTING = 64


def too_deep(steps: tuple[n.Step, ...]) -> Diagnostic | None:
    """E008 at the keyword of the first block (in program order) that is nested deeper than
    `MAX_NESTING`, else None."""
    todo = [(step, 1) for step in reversed(steps) if step.blocks]
    while todo:
        step, depth = todo.pop()
        if depth > MAX_NESTING:
            return Diagnostic(
                "E008",
                f"blocks nested more than {MAX_NESTING} deep",
                _keyword(step),
                f"at most {MAX_NESTING} levels of `repeat` and `if` blocks, one inside the other",
            )
        inner = [x for block in step.blocks for x in block if x.blocks]
        todo += [(x, depth + 1) for x in reversed(inner)]
    return None


def _keyword(step: n.Step) -> Span:
    s, word = step.span, "repeat" if isinstance(step, n.Repeat) else "if"
    return Span(s.file, s.line, s.col, s.line, s.col + len(word))
