"""`srpo-dsl fmt`: a workflow re-emitted in its one canonical layout, its tokens unchanged.

A token-level pretty printer. The text is parsed first (a syntax error is raised as `SrpoError`,
positioned as `validate` reports it, and nothing is formatted); the parser's own lexer then gives
the tokens, which are written back in the same order with canonical whitespace (the lines come
from `srpo_dsl.lang.tooling.layout`). Comments are kept, each where it was: alone on its line or after
the code. Nothing but the text is read: no Python file of the workflow is imported or run.

The layout (docs/dsl.md, "Formatting"): one statement per line, blocks indented by 4 spaces,
one space between tokens except none after `(` `[` `.`, none before `,` `)` `]` `.`, and none
before `(` `[` except after `with`, `=` and `,`; consecutive `agent` lines aligned in columns, and the
`=` of consecutive `policy` (`tool`, `env`) lines, by display width (`srpo_dsl.lang.tooling.width`),
an outlier cell left out; consecutive trailing comments aligned; runs of blank lines collapsed
to one; a final newline. Line endings and a byte-order mark stay as the text has them.
"""

from __future__ import annotations

from lark import Token
from lark.lexer import LexerState
from lark.utils import TextSlice

from srpo_dsl.lang.syntax.messages import BOM, without_bom
from srpo_dsl.lang.syntax.parser import _build_parser, parse
from srpo_dsl.lang.tooling.layout import Line, build_lines, statement_starts
from srpo_dsl.lang.tooling.width import display_width, pad

INDENT = "    "
AGENT_COLUMNS = ("uses", "prompt", "emits", "with")  # the keywords that start an agent line's columns
ASSIGN_COLUMNS = ("=",)
COLUMNS = {"agent": AGENT_COLUMNS, "policy": ASSIGN_COLUMNS, "tool": ASSIGN_COLUMNS, "env": ASSIGN_COLUMNS}
OUTLIER = 16  # display columns past the next cell down beyond which a cell no longer widens its column
_NO_SPACE_AFTER = frozenset({"(", "[", "."})
_NO_SPACE_BEFORE = frozenset({",", ")", "]", "."})
_SPACED = frozenset({"with", "=", ","})  # a `(` or `[` after these is spaced: `with (`, `= [`, `, [`


def tokens_of(text: str) -> list[Token]:
    """The tokens of (well-formed) `text`, as the parser's own lexer reads them; comments aside."""
    lexer = _build_parser().parser.lexer
    return list(lexer.lex(LexerState(TextSlice.cast_from(text)), None))


def line_ending(text: str) -> str:
    """The line ending formatted text is written with: its first line's, CRLF or else LF."""
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def format_source(text: str, file: str = "<string>") -> str:
    """`text` in the canonical layout; `SrpoError` (nothing formatted) when it does not parse.

    Every line ends as `text`'s first line does (`line_ending`), and a leading byte-order mark is
    kept (docs/cli.md, `srpo-dsl fmt`): a text in the layout comes back unchanged, whatever its
    line endings and mark."""
    bom = BOM if text.startswith(BOM) else ""
    newline = line_ending(text)
    text = without_bom(text).replace("\r\n", "\n")  # a CR before LF is in no token: positions stay
    program = parse(text, file)
    lines = build_lines(text, tokens_of(text), statement_starts(program))
    codes = [INDENT * line.depth + join(line.tokens) for line in lines]
    align_columns(lines, codes)
    place_comments(lines, codes)
    out = [("\n" if line.blank_before else "") + code.rstrip() for line, code in zip(lines, codes)]
    return bom + ("\n".join(out) + "\n").replace("\n", newline)


def _punct(tok: Token) -> str:
    """The token's text when it is punctuation or a keyword (not a name or a string), else ""."""
    return "" if tok.type in ("NAME", "STRING", "NUMBER") else str(tok)


def join(tokens: list[Token]) -> str:
    """Tokens with canonical spacing: `f(a, b)`, `solver[2]`, `task.answer`, `with (x = 1)`."""
    out: list[str] = []
    prev = ""
    for tok in tokens:
        this = _punct(tok)
        if out and not (
            prev in _NO_SPACE_AFTER
            or this in _NO_SPACE_BEFORE
            or (this in ("(", "[") and prev not in _SPACED)
        ):
            out.append(" ")
        out.append(str(tok))
        prev = this
    return "".join(out)


def _cells(line: Line) -> tuple[str, list[list[Token]]] | None:
    """A declaration's columns and its keyword (`agent`: name, uses, prompt, emits[, with]; `policy`,
    `tool`, `env`: name, `= ...`); None for any other line or a statement a comment interrupted."""
    toks = line.tokens
    columns = COLUMNS.get(_punct(toks[0])) if toks and not line.continuation else None
    if columns is None:
        return None
    cells: list[list[Token]] = [[]]
    for tok in toks:
        if len(cells) <= len(columns) and _punct(tok) == columns[len(cells) - 1]:
            cells.append([])
        cells[-1].append(tok)
    required = 4 if columns is AGENT_COLUMNS else 2
    return (_punct(toks[0]), cells) if len(cells) >= required else None


def _runs(lines: list[Line]) -> list[list[int]]:
    """Runs of consecutive whole declarations of one keyword (no blank line or comment line between)."""
    runs: list[list[int]] = []
    kinds: list[str] = []
    for i, line in enumerate(lines):
        cells = _cells(line)
        if cells is None or (i + 1 < len(lines) and lines[i + 1].continuation):
            continue
        if runs and runs[-1][-1] == i - 1 and not line.blank_before and kinds[-1] == cells[0]:
            runs[-1].append(i)
        else:
            runs.append([i])
            kinds.append(cells[0])
    return runs


def column_width(cells: list[int]) -> int:
    """The width of a column whose cells are `cells` columns wide: its widest cell that is no outlier.
    An outlier is wider by more than `OUTLIER` columns than the next cell down (after the outliers
    above it are set aside)."""
    widths = sorted(cells)
    while len(widths) > 1 and widths[-1] > widths[-2] + OUTLIER:
        widths.pop()
    return widths[-1] if widths else 0


def align_columns(lines: list[Line], codes: list[str]) -> None:
    """Consecutive declarations of one keyword in columns: a cell is padded to its column's width
    (`column_width`, in display columns) among the lines that go on after it (a line's last cell is
    never padded; an outlier is not padded and does not widen its column)."""
    for run in _runs(lines):
        if len(run) < 2:
            continue
        found = [_cells(lines[i]) for i in run]  # a run's lines are declarations: none is None
        rows = [[join(cell) for cell in cells[1]] for cells in found if cells is not None]
        widths = [column_width([display_width(row[c]) for row in rows if len(row) > c + 1]) for c in range(5)]
        for i, row in zip(run, rows):
            padded = [pad(cell, widths[c]) for c, cell in enumerate(row[:-1])] + [row[-1]]
            codes[i] = INDENT * lines[i].depth + " ".join(padded)


def place_comments(lines: list[Line], codes: list[str]) -> None:
    """Comments appended: alone at their line's indentation, or after the code. A run of consecutive
    lines with trailing comments puts them in one column: the rightmost of the columns they were
    written at, and at least one space past the longest code of the run."""
    run: list[int] = []
    for i, line in enumerate([*lines, Line(0)]):
        trailing = line.comment is not None and bool(line.tokens)
        if run and (not trailing or line.blank_before):
            col = max(max(lines[j].comment_col, display_width(codes[j].rstrip()) + 1) for j in run)
            for j in run:
                codes[j] = pad(codes[j].rstrip(), col) + str(lines[j].comment)
            run = []
        if trailing:
            run.append(i)
        elif line.comment is not None:
            codes[i] = INDENT * line.depth + line.comment
