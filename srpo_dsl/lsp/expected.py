"""What the grammar accepts at a position: the tokens written before it and the parser's expected terminals.

The text before the cursor (less the word being typed) is lexed, and the statement of the file it ends
in is fed to Lark's interactive LALR parser (`lark_parser()`, the grammar's own) after `workflow _`; its
`accepts()` are the terminals that may come next. A statement with an error before the cursor is fed
again from the start of a statement nearer the cursor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lark import Token
from lark.exceptions import UnexpectedInput

from srpo_dsl.lang.syntax.grammar import lark_parser, statements

_TYPED = re.compile(r"[A-Za-z0-9_]*")  # matched on the cursor's line reversed: the word being typed
_NOT_A_HEAD_AFTER = frozenset({"EMITS", "COMMA", "LPAR"})  # `emits route`, `task.answer`: not statements
_RESTARTS = 3  # statements tried back from the cursor when the text before them has an error


@dataclass(frozen=True)
class Expected:
    """`tokens`: those before the cursor, from the start of the file or of a statement; `accepts`: the
    terminal names the parser takes next (`NAME`, `BY`, `$END`, ...)."""

    tokens: tuple[Token, ...]
    accepts: frozenset[str]

    @property
    def last(self) -> str | None:
        return self.tokens[-1].type if self.tokens else None

    def _head_at(self) -> int | None:
        heads = _heads()
        return next((i for i in range(len(self.tokens) - 1, -1, -1) if _is_head(self.tokens, i, heads)), None)

    def head(self) -> str | None:
        """The keyword of the statement the cursor is in (`AGENT`, `TRAIN`, `PARALLEL`, ...)."""
        at = self._head_at()
        return None if at is None else self.tokens[at].type

    def statement(self) -> tuple[Token, ...]:
        """The tokens of the statement the cursor is in, up to the cursor."""
        return self.tokens[self._head_at() or 0 :]

    def list_opener(self) -> str | None:
        """The token before a list of names the cursor ends (`on` of `on a, b, `)."""
        for tok in reversed(self.tokens):
            if tok.type not in ("NAME", "COMMA"):
                return tok.type
        return None

    def opener(self) -> int | None:
        """The index of the `(` left open before the cursor, if any."""
        depth = 0
        for i in range(len(self.tokens) - 1, -1, -1):
            kind = self.tokens[i].type
            depth += {"RPAR": 1, "LPAR": -1}.get(kind, 0)
            if depth < 0:
                return i
        return None


def _heads() -> frozenset[str]:
    found = statements(lark_parser())
    return found.steps | found.declarations


def _is_head(tokens: tuple[Token, ...] | list[Token], i: int, heads: frozenset[str]) -> bool:
    """Whether `tokens[i]` starts a statement (`route` after `emits` is a contract, `task.` a field)."""
    return tokens[i].type in heads and (i == 0 or tokens[i - 1].type not in _NOT_A_HEAD_AFTER)


def typed_length(before: str) -> int:
    """How many characters of the word being typed end `before`: one match from the cursor back over its
    line (a search for a word at the end would try every start before it: quadratic in a long word)."""
    line = before[before.rfind("\n") + 1 :]
    return len(_TYPED.match(line[::-1])[0])


def in_comment_or_string(line_before: str) -> bool:
    """Whether a cursor after `line_before` (its line up to it) is in a comment or a string (neither
    spans lines)."""
    quoted = escaped = False
    for ch in line_before:
        if escaped:
            escaped = False
        elif quoted and ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            return True
    return quoted


def _accepts(tokens: list[Token]) -> frozenset[str] | None:
    parser = lark_parser().parse_interactive("")
    try:
        for tok in tokens:
            parser.feed_token(tok)
    except UnexpectedInput:
        return None
    return frozenset(parser.accepts())


def _top_level(tokens: list[Token], starts: list[int]) -> int:
    """The last of `starts` outside every `{ ... }` (the statement of the file the cursor is in)."""
    depth, top = 0, starts[0]
    heads = set(starts)
    for i, tok in enumerate(tokens):
        depth += {"LBRACE": 1, "RBRACE": -1}.get(tok.type, 0)
        if depth <= 0 and i in heads:
            top = i
    return top


def expected(before: str) -> Expected | None:
    """What may follow `before` (the text up to the cursor); None when it does not lex, or has an error
    in each statement tried: the file's statement the cursor is in (from `workflow _`, so the cost does
    not grow with the file), then the last few statements before the cursor."""
    try:
        tokens = list(lark_parser().lex(before[: len(before) - typed_length(before)]))
    except UnexpectedInput:
        return None
    heads = _heads()
    starts = [i for i in range(len(tokens)) if _is_head(tokens, i, heads)]
    if not starts:  # the workflow's header, or nothing
        found = _accepts(tokens)
        return None if found is None else Expected(tuple(tokens), found)
    workflow = [Token("WORKFLOW", "workflow"), Token("NAME", "_")]
    for start in [_top_level(tokens, starts), *starts[::-1][:_RESTARTS]]:
        found = _accepts(workflow + tokens[start:])
        if found is not None:
            return Expected(tuple(tokens[start:]), found)
    return None
