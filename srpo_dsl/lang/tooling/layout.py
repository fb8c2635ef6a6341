"""A workflow's tokens and comments -> lines: where each line starts, its depth, its comment.

The token-level half of `srpo-dsl fmt` (`srpo_dsl.lang.tooling.format` renders the lines): the tokens come
from the parser's own lexer and keep their order; only the whitespace between them is decided here.
A line starts at every statement (the parsed program's spans say where), at `}` and after `{`;
a comment written inside a statement ends its line and the statement goes on on a continuation line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from lark import Token

from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.lexer import token_offsets, token_span
from srpo_dsl.lang.tooling.width import display_width

COMMENT = re.compile(r"#[^\n]*")


@dataclass
class Line:
    """One output line: its depth (4 spaces each), its tokens, and a comment at its end (or alone)."""

    depth: int
    tokens: list[Token] = field(default_factory=list)
    comment: str | None = None
    comment_col: int = 0  # the comment's display column in the source (0-based): kept when past the code
    blank_before: bool = False
    continuation: bool = False  # the rest of a statement a comment interrupted


def statement_starts(program: n.Program) -> set[tuple[int, int]]:
    """(line, column) of every statement's first token: declarations and steps, nested ones too."""
    declared = (
        program.policies,
        program.tasks,
        program.tools,
        program.envs,
        program.agents,
        program.rewards,
        program.trains,
    )
    spans = [d.span for group in declared for d in group]
    spans += [s.span for s in n.walk_steps(program.steps)]
    return {(s.line, s.col) for s in spans}


def _gap_parts(gap: str, gap_start: int) -> Iterator[tuple[str, int]]:
    """The whitespace before each comment of `gap` and the comment, then ("", -1) for the rest."""
    pos = 0
    for m in COMMENT.finditer(gap):
        yield gap[pos : m.start()], gap_start + m.start()
        pos = m.end()
    yield gap[pos:], -1


class _Builder:
    """Lines built token by token; `open`: the last line takes more tokens of its statement."""

    def __init__(self, text: str, starts: set[tuple[int, int]]):
        self.text, self.starts = text, starts
        self.lines: list[Line] = []
        self.depth, self.open, self.blank = 0, False, False

    def _new(self, line: Line) -> None:
        if self.blank and self.lines and not self._after_open_brace() and not _closes(line):
            line.blank_before = True
        self.blank = False
        self.lines.append(line)

    def _after_open_brace(self) -> bool:
        last = self.lines[-1]
        return bool(last.tokens) and last.tokens[-1] == "{"

    def gap(self, start: int, end: int, first: bool, following: Token | None) -> None:
        """The whitespace and comments between two tokens (`following`: the token after, or None)."""
        for space, at in _gap_parts(self.text[start:end], start):
            self.blank |= space.count("\n") >= 2
            if at < 0:
                return
            found = COMMENT.match(self.text, at)
            assert found is not None, "`_gap_parts` found a comment there"
            comment = found.group().rstrip()
            col = display_width(self.text[self.text.rfind("\n", 0, at) + 1 : at])
            if "\n" not in space and not first:  # after a token on its line: a trailing comment
                self.lines[-1].comment, self.lines[-1].comment_col = comment, col
            else:
                self._new(Line(self._comment_depth(following), comment=comment))
            self.open = False

    def _comment_depth(self, following: Token | None) -> int:
        """The depth of what follows: a statement's, the inside of a block before its `}`, or more."""
        if following is None or following == "}" or self._starts(following):
            return self.depth
        return self.depth + 1

    def _starts(self, tok: Token) -> bool:
        span = token_span("", tok)
        return (span.line, span.col) in self.starts

    def token(self, tok: Token) -> None:
        if tok == "}" and tok.type != "STRING":
            self.depth -= 1
            self._new(Line(self.depth, [tok]))
        elif self._starts(tok):
            self._new(Line(self.depth, [tok]))
        elif self.open:
            self.lines[-1].tokens.append(tok)
            self.blank = False
        else:
            self._new(Line(self.depth + 1, [tok], continuation=True))
        self.open = True
        if tok == "{" and tok.type != "STRING":
            self.depth += 1
            self.open = False


def _closes(line: Line) -> bool:
    return bool(line.tokens) and line.tokens[0] == "}"


def build_lines(text: str, tokens: list[Token], starts: set[tuple[int, int]]) -> list[Line]:
    """The lines of a parsed workflow: `tokens` in order, with every comment of `text` between them."""
    if tokens:
        first = token_span("", tokens[0])
        starts = starts | {(first.line, first.col)}  # `workflow NAME`
    b = _Builder(text, starts)
    end = 0
    for i, tok in enumerate(tokens):
        start, after = token_offsets(tok)
        b.gap(end, start, i == 0, tok)
        b.token(tok)
        end = after
    b.gap(end, len(text), not tokens, None)
    return b.lines
