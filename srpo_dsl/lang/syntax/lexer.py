"""The grammar's terminals compiled into one scanning regex: a fast lexer for Lark's LALR parser.

Lark's own basic lexer matches one token at a time and keeps a line counter in Python; this one
scans with a single `re.finditer` over the alternation of every terminal of `grammar/srpo.lark`
(ordered as Lark orders them), so the grammar stays the one source of the syntax. Keywords are
the string terminals that another terminal's pattern also matches (`agent` is also a NAME): they
are looked up after a match, as Lark does. Tokens are equal to Lark's, positions included; a
character no terminal matches raises Lark's `UnexpectedCharacters`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import cast

from lark import Token
from lark.common import LexerConf
from lark.exceptions import UnexpectedCharacters
from lark.lexer import Lexer, LexerState

from srpo_dsl.lang.syntax.messages import Span


def token_span(file: str, tok: Token) -> Span:
    """Where a token was written. Lark's stubs allow a token without a position (one made by hand); a
    lexer's tokens, ours and Lark's, all have one."""
    return Span(
        file, cast(int, tok.line), cast(int, tok.column), cast(int, tok.end_line), cast(int, tok.end_column)
    )


def token_offsets(tok: Token) -> tuple[int, int]:
    """A lexer's token's first offset and the offset after it (see `token_span`)."""
    return cast(int, tok.start_pos), cast(int, tok.end_pos)


class ScanLexer(Lexer):
    """A Lark custom lexer (`Lark(..., lexer=ScanLexer)`)."""

    __future_interface__ = 2  # lex(lexer_state, parser_state)

    def __init__(self, conf: LexerConf):
        # Lark's order: priority, then longest possible match, then longest literal, then name.
        terminals = sorted(
            conf.terminals, key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name)
        )
        regexes = [t for t in terminals if t.pattern.type == "re"]
        self.keywords: dict[tuple[str, str], str] = {}  # (matched terminal, text) -> keyword terminal
        scanned = []
        for t in terminals:
            owner = next(
                (
                    r
                    for r in regexes
                    if t.pattern.type == "str" and re.fullmatch(r.pattern.to_regexp(), t.pattern.value)
                ),
                None,
            )
            if owner is None:
                scanned.append(t)
            else:
                self.keywords[owner.name, t.pattern.value] = t.name
        self.keyword_owners = frozenset(owner for owner, _ in self.keywords)
        ignore = frozenset(conf.ignore)
        self.allowed = frozenset(t.name for t in terminals) - ignore
        # Ignored text (spaces, comments) is skipped by the same match as the token after it, greedily
        # and without giving back (a lookahead is atomic): `#0` stays a comment, as in Lark.
        skip = "(?:" + "|".join(t.pattern.to_regexp() for t in scanned if t.name in ignore) + ")*"
        self.skip = re.compile(skip, conf.g_regex_flags)
        self.scanner = re.compile(
            f"(?=(?P<_skipped>{skip}))(?P=_skipped)(?:"
            + "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in scanned if t.name not in ignore)
            + ")",
            conf.g_regex_flags,
        )

    def lex(self, lexer_state: LexerState, parser_state: object) -> Iterator[Token]:
        text = lexer_state.text.text
        pos, line, line_start = 0, 1, 0  # line_start: offset of the current line's first character
        keywords, owners, new = self.keywords, self.keyword_owners, str.__new__
        for m in self.scanner.finditer(text):
            if m.start() != pos:
                break
            kind = cast(str, m.lastgroup)  # every alternative is a named group: a match has one
            start, end = m.span(kind)
            skipped_lines = text.count("\n", pos, start)
            if skipped_lines:
                line, line_start = line + skipped_lines, text.rindex("\n", pos, start) + 1
            value, first, col, pos = m.group(kind), line, start - line_start + 1, end
            if "\n" in value:
                line, line_start = line + value.count("\n"), start + value.rindex("\n") + 1
            if kind in owners:
                kind = keywords.get((kind, value), kind)
            tok = new(Token, value)  # what `Token(...)` does, without its argument handling
            tok.type, tok.value, tok.start_pos, tok.end_pos = kind, value, start, pos
            tok.line, tok.column, tok.end_line, tok.end_column = first, col, line, pos - line_start + 1
            yield tok
        skipped = self.skip.match(text, pos)  # trailing spaces and comments, or where nothing matches
        assert skipped is not None, "`skip` matches the empty string"
        stop = skipped.end()
        if stop != len(text):
            line, line_start = line + text.count("\n", pos, stop), text.rfind("\n", 0, stop) + 1
            raise UnexpectedCharacters(
                text, stop, line, stop - line_start + 1, allowed=self.allowed, state=parser_state
            )
