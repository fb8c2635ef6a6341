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
from typing import Any, Iterator

from lark import Token
from lark.exceptions import UnexpectedCharacters
from lark.lexer import Lexer, LexerState


class ScanLexer(Lexer):
    """A Lark custom lexer (`Lark(..., lexer=ScanLexer)`)."""

    __future_interface__ = 2  # lex(lexer_state, parser_state)

    def __init__(self, conf: Any):
        # Lark's order: priority, then longest possible match, then longest literal, then name.
        terminals = sorted(conf.terminals, key=lambda t: (-t.priority, -t.pattern.max_width,
                                                           -len(t.pattern.value), t.name))
        regexes = [t for t in terminals if t.pattern.type == "re"]
        self.keywords: dict[tuple[str, str], str] = {}  # (matched terminal, text) -> keyword terminal
        scanned = []
        for t in terminals:
            owner = next((r for r in regexes if t.pattern.type == "str"
                          and re.fullmatch(r.pattern.to_regexp(), t.pattern.value)), None)
            if owner is None:
                scanned.append(t)
            else:
                self.keywords[owner.name, t.pattern.value] = t.name
        self.keyword_owners = frozenset(owner for owner, _ in self.keywords)
        self.ignore = frozenset(conf.ignore)
        self.allowed = frozenset(t.name for t in terminals) - self.ignore
        self.scanner = re.compile("|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in scanned),
                                  conf.g_regex_flags)

    def lex(self, lexer_state: LexerState, parser_state: Any) -> Iterator[Token]:
        text = lexer_state.text.text
        pos, line, line_start = 0, 1, 0  # line_start: offset of the current line's first character
        keywords, owners, ignore, new = self.keywords, self.keyword_owners, self.ignore, Token._future_new
        for m in self.scanner.finditer(text):
            start = m.start()
            if start != pos:
                break
            kind, value = m.lastgroup, m.group()
            first, col, pos = line, start - line_start + 1, m.end()
            if "\n" in value:
                line, line_start = line + value.count("\n"), start + value.rindex("\n") + 1
            if kind in ignore:
                continue
            if kind in owners:
                kind = keywords.get((kind, value), kind)
            yield new(kind, value, start, first, col, line, pos - line_start + 1, pos)
        if pos != len(text):
            raise UnexpectedCharacters(text, pos, line, pos - line_start + 1, allowed=self.allowed,
                                       state=parser_state)
