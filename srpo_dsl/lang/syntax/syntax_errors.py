"""Syntax errors in words a user reads, and recovery: several errors per run, each at its position.

The text a fast parse rejected is parsed again by Lark's own pipeline, which stops at the first
error with what it expected there. The erroneous statement is then blanked and the parse resumed
at the next statement, when that is safe: not after a block left open (a missing `}`), which
blanking cannot close, so every later statement would be reported again.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import re
import unicodedata
from collections.abc import Iterator

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from srpo_dsl.lang.syntax.grammar import lark_parser, statements
from srpo_dsl.lang.syntax.lexer import token_offsets
from srpo_dsl.lang.syntax.messages import Diagnostic, Span
from srpo_dsl.lang.syntax.nesting import too_deep_tokens

MAX_PARSE_ERRORS = 10

# What a user reads instead of a terminal's internal name (a keyword reads as itself: `agent`).
_TERMINAL_WORDS = {
    "NAME": "a name",
    "DASHED": "a name",  # a value's word with `-` (`token-mean`)
    "STRING": "a string in double quotes",
    "NUMBER": "a number",
    "COMPARE": "`==` or `!=`",
    "$END": "the end of the file",
}

# Common mistakes, recognised by example, with a plainer message (Lark's match_examples).
_EXAMPLES: dict[tuple[str, str], list[str]] = {
    ("E004", 'an agent needs `prompt "FILE.j2"` before `emits`'): [
        "workflow w agent a uses lm emits boxed",
    ],
    ("E005", "a loop is written `repeat at most N { ... }`"): [
        "workflow w repeat 4 { }",
        "workflow w repeat at 4 { }",
    ],
    ("E006", 'a binding needs `=`: `policy NAME = hf("MODEL")`'): [
        'workflow w policy lm hf("x")',
        'workflow w tool t bm25(corpus = "c")',
    ],
    ("E007", "a condition compares an agent with a word: `verifier == approve`"): [
        "workflow w if v { }",
        "workflow w repeat at most 2 { } until v",
        "workflow w break if v",
    ],
}


def _situation(err: UnexpectedToken) -> int:
    """Where the parser stood (its LR state); equal states, equal mistakes."""
    state: int = err.interactive_parser.parser_state.state_stack[-1]
    return state


@functools.lru_cache(maxsize=4)
def _example_labels(parser: Lark) -> dict[int, tuple[str, str]]:
    """Like Lark's `match_examples`, keyed by the LR state alone: context before the error does not matter.
    (`parser`'s own states: registering a step kind builds another parser.)"""
    labels: dict[int, tuple[str, str]] = {}
    for label, examples in _EXAMPLES.items():
        for example in examples:
            try:
                parser.parse(example)
            except UnexpectedToken as err:
                labels.setdefault(_situation(err), label)
    return labels


def _describe(term: str, parser: Lark) -> str:
    if term in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[term]
    try:
        pattern = parser.get_terminal(term).pattern
    except KeyError:
        return term.lower()
    return f"`{pattern.value}`" if pattern.type == "str" else term.lower()


def _expected(err: UnexpectedInput, parser: Lark) -> str:
    accepts: set[str] = set()
    if isinstance(err, (UnexpectedToken, UnexpectedEOF)) and getattr(err, "interactive_parser", None):
        accepts = set(err.interactive_parser.accepts())
    if not accepts:
        accepts = set(getattr(err, "expected", ()) or getattr(err, "allowed", ()) or ())
    groups = statements(parser)
    for spelled in (groups.value_words, groups.step_kinds):  # a value's word, a contract's name
        if "NAME" in accepts and spelled <= accepts:
            accepts -= spelled
    labels = set()
    for group, label in ((groups.steps, "a step"), (groups.declarations, "a declaration")):
        if group <= accepts:
            accepts -= group
            labels.add(label)
    names = {_describe(t, parser) for t in accepts} | labels
    words = sorted(names, key=lambda w: (not w.startswith("`"), w))
    if not words:
        return ""
    if len(words) > 8:
        return f" (expected one of {len(words)} things, e.g. {', '.join(words[:6])})"
    return " (expected " + (words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]) + ")"


def _at_end(err: UnexpectedInput) -> bool:
    return isinstance(err, UnexpectedEOF) or (isinstance(err, UnexpectedToken) and err.token.type == "$END")


def _found(err: UnexpectedInput) -> str:
    if isinstance(err, UnexpectedCharacters):
        return f"unexpected character `{err.char}`"
    if _at_end(err) or not isinstance(err, UnexpectedToken):  # Lark's third kind: UnexpectedEOF
        return "unexpected end of file"
    return f"unexpected `{err.token}`"


@functools.lru_cache(maxsize=4)
def _closing_brace(parser: Lark) -> str:
    """The terminal that closes a block (`}`), read off the grammar's `block` rule."""
    return next(r.expansion[-1].name for r in parser.rules if r.origin.name == "block")


def _block_left_open(err: UnexpectedInput, parser: Lark) -> bool:
    """Whether a `}` before the unexpected token would let the parse go on: a block is missing its `}`."""
    if not isinstance(err, UnexpectedToken) or getattr(err, "interactive_parser", None) is None:
        return False
    close = _closing_brace(parser)
    state = err.interactive_parser.copy(deepcopy_values=False)  # the trees are not read: no deep copy
    quiet = copy.copy(state.parser_state.parse_conf)  # (a deep copy of 400 nested blocks overflowed)
    quiet.callbacks = {}  # the `}` fed below builds no tree (as lark's own `accepts` feeds its tokens)
    state.parser_state.parse_conf = quiet
    if close not in state.accepts():
        return False
    state.feed_token(Token(close, "}"))
    return err.token.type in state.accepts()


def _not_a_name(err: UnexpectedInput, parser: Lark) -> tuple[str, str] | None:
    """(message, hint) for a word written where a name is expected that the lexer did not read as a
    name: a keyword (`agent agent ...`: the grammar's, or a step kind's), or a word with `-` (`agent
    my-agent ...`: only a value may have one)."""
    if not isinstance(err, UnexpectedToken) or "NAME" not in (err.expected or ()):
        return None
    word, kind = str(err.token), err.token.type
    if kind == "DASHED":
        return (
            f"`{word}` is not a name: a name is ASCII letters, digits and `_`",
            f"e.g. `{word.replace('-', '_')}`",
        )
    name = parser.get_terminal("NAME").pattern.to_regexp()
    if kind != "NAME" and re.fullmatch(name, word):
        return f"`{word}` is a keyword and cannot be a name", f"pick another name, e.g. `{word}_1`"
    return None


def _last_token(text: str, end: int, parser: Lark) -> Token | None:
    """The last token that starts before offset `end` (comments are not tokens)."""
    last = None
    for token in _tokens(text, parser):
        if token_offsets(token)[0] >= end:
            break
        last = token
    return last


def _tokens(text: str, parser: Lark) -> Iterator[Token]:
    """The tokens of `text` up to a character no terminal matches (comments are not tokens)."""
    with contextlib.suppress(UnexpectedCharacters):  # a bad character after the tokens read so far
        yield from parser.lex(text)


def _incomplete(err: UnexpectedInput, parser: Lark) -> bool:
    """Whether the statement before the unexpected token cannot end there: no statement may start, and no
    block close, where it stands (`call calc` then a new line: `on` is missing, not the next line wrong)."""
    if not isinstance(err, UnexpectedToken) or getattr(err, "interactive_parser", None) is None:
        return False
    return not set(err.interactive_parser.accepts()) & statements(parser).boundaries


def _missing_word(err: UnexpectedInput, text: str, parser: Lark) -> tuple[Token, str] | None:
    """Where a missing word belongs, when the statement stops at the end of a line and what follows
    cannot continue it (or the file ends): the statement's last token, and what to say of the next one."""
    if _at_end(err):
        last = _last_token(text, len(text), parser)
        return (last, "") if last is not None else None
    if not isinstance(err, UnexpectedToken) or not _incomplete(err, parser):
        return None
    last = _last_token(text, err.token.start_pos or 0, parser)
    if last is None or last.end_line is None or last.end_line >= err.line:
        return None  # the next token is on the statement's own line: it is the one out of place
    return last, f": the next token, `{err.token}` on line {err.line}, cannot continue it"


def _diagnostic(err: UnexpectedInput, file: str, text: str, parser: Lark, open_block: bool) -> Diagnostic:
    line, col = max(1, getattr(err, "line", 1) or 1), max(1, getattr(err, "column", 1) or 1)
    width = 1
    found = _found(err)
    missing = _missing_word(err, text, parser)
    if missing is not None:  # point where the missing word belongs: after the statement's last token
        last = missing[0]
        line, col = last.end_line or line, last.end_column or col
        found = "unexpected end of file" if _at_end(err) else "incomplete statement"
    elif _at_end(err):
        lines = text.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
    elif isinstance(err, UnexpectedToken):
        width = max(1, len(str(err.token)))
    span = Span(file, line, col, line, col + width)
    if isinstance(err, UnexpectedCharacters) and err.char == '"':
        return Diagnostic("E002", "unterminated string", span, 'close the string with `"` on the same line')
    if isinstance(err, UnexpectedCharacters) and not err.char.isascii() and err.char.isidentifier():
        return _non_ascii_name(err, text, span)
    code, hint = (
        ("E003" if _at_end(err) else "E002" if isinstance(err, UnexpectedCharacters) else "E001"),
        None,
    )
    not_a_name = _not_a_name(err, parser) if missing is None else None
    if not_a_name is not None:
        return Diagnostic("E001", not_a_name[0], span, not_a_name[1])
    label = _example_labels(parser).get(_situation(err)) if isinstance(err, UnexpectedToken) else None
    if label is not None:
        code, hint = label
    elif open_block:
        where = "at the end"  # Lark's UnexpectedEOF, or a token at the end
        if isinstance(err, UnexpectedToken) and not _at_end(err):
            where = f"before `{err.token}`"
        hint = f"a block is still open here: is a `}}` missing {where} or earlier?"
    return Diagnostic(code, found + _expected(err, parser) + (missing[1] if missing else ""), span, hint)


def _non_ascii_name(err: UnexpectedCharacters, text: str, span: Span) -> Diagnostic:
    """A letter outside ASCII where the grammar reads a name (`agent rédacteur`): names are ASCII."""
    at = err.pos_in_stream
    assert at is not None, "a lexer's error has its offset"
    before = re.search(r"\w*$", text[text.rfind("\n", 0, at) + 1 : at])
    after = re.compile(r"\w*").match(text, at)
    assert before is not None and after is not None, "`\\w*` matches the empty string"
    word = before.group() + after.group()
    plain = unicodedata.normalize("NFKD", word).encode("ascii", "ignore").decode()
    example = f", e.g. `{plain}`" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", plain) else ""
    return Diagnostic(
        "E002",
        f"unexpected character `{err.char}` in `{word}`: a name is ASCII letters, digits and `_`",
        span,
        f"spell the name in ASCII{example} (any character may appear in a string or a comment)",
    )


def _resumes(line: str, parser: Lark) -> bool:
    """Whether `line` starts a statement, closes a block, or holds no token: a place to resume at."""
    try:
        first = next(iter(parser.lex(line)), None)
    except UnexpectedCharacters:
        return False
    return first is None or first.type in statements(parser).boundaries


def _blank_from(text: str, line: int, parser: Lark) -> str:
    """Blank the erroneous statement: from `line` up to the next line that starts a statement."""
    lines = text.split("\n")
    end = line
    while end < len(lines) and not _resumes(lines[end], parser):
        end += 1
    for k in range(line - 1, min(end, len(lines))):
        lines[k] = re.sub(r"\S", " ", lines[k])
    return "\n".join(lines)


def _depth(text: str) -> int:
    return text.count("{") - text.count("}")


def syntax_errors(text: str, file: str = "<string>") -> list[Diagnostic]:
    """Every syntax error found (up to a limit), resuming after each at the next statement when safe; for
    text nested too deep for Lark's pipeline to recurse through, E008 alone."""
    parser = lark_parser()
    deep = too_deep_tokens(_tokens(text, parser), file)
    if deep is not None:
        return [deep]
    diags: list[Diagnostic] = []
    work = text
    while len(diags) < MAX_PARSE_ERRORS:
        try:
            parser.parse(work)
            break
        except UnexpectedInput as err:
            open_block = _block_left_open(err, parser)
            diag = _diagnostic(err, file, work, parser, open_block)
            if diags and (diag.span.line, diag.span.col) <= (diags[-1].span.line, diags[-1].span.col):
                break  # no progress: recovery would only repeat itself
            diags.append(diag)
            if (
                open_block
                or diag.code == "E003"
                or (isinstance(err, UnexpectedToken) and err.token.type in statements(parser).boundaries)
            ):
                break  # a block or the statement before is unfinished: no safe place to resume
            recovered = _blank_from(work, diag.span.line, parser)
            if recovered == work or _depth(recovered) != _depth(work):
                break  # blanking would unbalance the braces: later errors would be noise
            work = recovered
    return diags
