"""textDocument/foldingRange: loops and conditionals (their closing line stays shown), declarations
written over several lines, and runs of comment lines."""

from __future__ import annotations

from lsprotocol import types as lsp

from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lsp.symbols import parsed


def _comments(text: str) -> list[lsp.FoldingRange]:
    """Each run of two or more lines that are comments only."""
    out, start = [], None
    lines = text.split("\n")
    for i, line in enumerate([*lines, ""]):
        if line.lstrip().startswith("#"):
            start = i if start is None else start
            continue
        if start is not None and i - start > 1:
            out.append(lsp.FoldingRange(start_line=start, end_line=i - 1, kind=lsp.FoldingRangeKind.Comment))
        start = None
    return out


def folding_ranges(text: str, path: str) -> list[lsp.FoldingRange]:
    """0-based line ranges: a block step from its first line to the one before its `}`, a declaration over
    lines whole, comments; none from a file with syntax errors but its comments."""
    program = parsed(text, path)
    out = _comments(text)
    if program is None:
        return out
    decls = [*program.policies, *program.tasks, *program.tools, *program.envs, *program.agents]
    decls += [*program.rewards, *program.trains]
    for d in decls:
        if d.span.end_line > d.span.line:
            out.append(lsp.FoldingRange(start_line=d.span.line - 1, end_line=d.span.end_line - 1))
    for s in n.walk_steps(program.steps):
        if s.blocks and s.span.end_line - 1 > s.span.line:
            out.append(lsp.FoldingRange(start_line=s.span.line - 1, end_line=s.span.end_line - 2))
    return sorted(out, key=lambda r: (r.start_line, r.end_line))
