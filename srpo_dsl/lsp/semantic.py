"""textDocument/semanticTokens/full: each token of the file by what it is, read from the grammar's own
lexer (keywords, strings, numbers, comments, operators) and the file's declarations (a name is an agent,
a policy, a tool or an environment where the file declares one; a contract, a kind or a reward function
a function; an option's name a property; any other name, a value or a word, an enum member, as is
a value's word that spells a keyword)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator

from lark import Token
from lark.exceptions import UnexpectedInput
from lsprotocol import types as lsp

from srpo_dsl.lang.syntax.grammar import lark_parser, statements
from srpo_dsl.lsp.completion import declared
from srpo_dsl.lsp.units import Units

TOKEN_TYPES = ["keyword", "class", "variable", "function", "namespace", "string", "number", "comment"]
TOKEN_TYPES += ["operator", "property", "enumMember"]
LEGEND = lsp.SemanticTokensLegend(token_types=TOKEN_TYPES, token_modifiers=[])
_BY_KIND = {"agent": "class", "policy": "variable", "tool": "function", "env": "namespace"}
_BY_TERMINAL = {
    "STRING": "string",
    "NUMBER": "number",
    "COMMENT": "comment",
    "COMPARE": "operator",
    "EQUAL": "operator",
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _lexed(text: str) -> Iterator[Token]:
    """The tokens of `text` but white space, comments included, up to the first character no terminal
    matches, as they are lexed."""
    with contextlib.suppress(UnexpectedInput):  # the tokens before it are kept
        yield from (t for t in lark_parser().lex(text, dont_ignore=True) if t.type != "WS")


def _around(tokens: Iterator[Token]) -> Iterator[tuple[Token | None, Token, Token | None]]:
    """Each token with the one before and the one after it (None at the ends), one token ahead."""
    before, tok = None, next(tokens, None)
    while tok is not None:
        after = next(tokens, None)
        yield before, tok, after
        before, tok = tok, after


def _kind(tok: Token, around: tuple[Token | None, Token | None], names: dict[str, str]) -> str | None:
    """The token type of `tok`, between the tokens `around` it (None at the file's ends)."""
    before, after = (t.type if t is not None else "" for t in around)
    if before == "EMITS" or (tok.type == "NAME" and after == "LPAR"):
        return "function"  # a contract, a kind, a reward function
    if tok.type in _BY_TERMINAL:
        return _BY_TERMINAL[tok.type]
    if tok.type == "DASHED" or (before == "EQUAL" and tok.type in statements(lark_parser()).value_words):
        return "enumMember"  # a value's word: `token-mean`, or a keyword's (`advantage = agent`)
    if tok.type != "NAME":
        return "keyword" if _IDENT.fullmatch(tok) else None
    if before == "WORKFLOW":
        return "namespace"
    if tok in names:
        return _BY_KIND[names[tok]]
    return "property" if after == "EQUAL" else "enumMember"  # an option's name; a value or a word


def semantic_tokens(text: str) -> Iterator[tuple[int, int, int, int]]:
    """(line, start, length, index in `TOKEN_TYPES`) of each classified token, in order (0-based, in
    code points), as the text is lexed: one pass (`chunked` takes them a few at a time)."""
    names = {d.name: d.kind for d in declared(text)}
    for before, tok, after in _around(_lexed(text)):
        kind = _kind(tok, (before, after), names)
        if kind is not None:
            yield tok.line - 1, tok.column - 1, len(tok), TOKEN_TYPES.index(kind)


def semantic_ranges(text: str) -> Iterator[tuple[lsp.Range, int]]:
    """`semantic_tokens` as (range, index in `TOKEN_TYPES`) (one line each)."""
    for line, start, length, kind in semantic_tokens(text):
        rng = lsp.Range(start=lsp.Position(line, start), end=lsp.Position(line, start + length))
        yield rng, kind


def in_units(
    tokens: Iterable[tuple[int, int, int, int]], units: Units
) -> Iterator[tuple[int, int, int, int]]:
    """`tokens` with their start and length in the client's units (as they are, in an ASCII text)."""
    if units.lines is None:
        yield from tokens
        return
    for line, start, length, kind in tokens:
        rng = units.range(lsp.Range(start=lsp.Position(line, start), end=lsp.Position(line, start + length)))
        yield line, rng.start.character, rng.end.character - rng.start.character, kind


def encode(tokens: Iterable[tuple[int, int, int, int]]) -> list[int]:
    """LSP's relative encoding: per token, its line and start from the previous token's, length, type."""
    data, last_line, last_start = [], 0, 0
    for line, start, length, kind in tokens:
        delta_line = line - last_line
        data += [delta_line, start - (last_start if delta_line == 0 else 0), length, kind, 0]
        last_line, last_start = line, start
    return data
