"""Text -> typed syntax tree: the Lark LALR parser, its error messages and recovery."""

from __future__ import annotations

import functools
import re
import threading
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from srpo_dsl.lang import nodes as n
from srpo_dsl.lang.errors import Diagnostic, Span, SrpoError
from srpo_dsl.lang.lexer import ScanLexer

MAX_PARSE_ERRORS = 10

# What a user reads instead of a terminal's internal name.
_TERMINAL_WORDS = {
    "NAME": "a name",
    "STRING": "a string in double quotes",
    "NUMBER": "a number",
    "COMPARE": "`==` or `!=`",
    "ROUTE": "`route`",
    "TASK": "`task`",
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


def grammar_text() -> str:
    """The grammar: package data when installed, else the repository's `grammar/srpo.lark`."""
    packaged = resources.files("srpo_dsl").joinpath("_data/grammar/srpo.lark")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[2] / "grammar" / "srpo.lark").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=2)
def lark_parser(strict: bool = False) -> Lark:
    """Lark's own pipeline (basic lexer, parse tree): what syntax errors are found and explained with."""
    # `cache=True` stores the LALR tables in the temp folder, keyed by the grammar's hash.
    return Lark(
        grammar_text(), parser="lalr", lexer="basic", maybe_placeholders=True, strict=strict, cache=not strict
    )


_UNESCAPE = re.compile(r"\\(.)")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_WHOLE = re.compile(r"[0-9]+")


class _Part(NamedTuple):
    """A piece of a rule that is not a node (a block, a selector, a `[N]`), with its closing token."""

    value: Any
    last: Token


def _tok_span(file: str, tok: Token) -> Span:
    return Span(file, tok.line, tok.column, tok.end_line, tok.end_column)


class _Build:
    """Lark's inline callbacks, one per rule: the rule's tokens and sub-results -> `nodes` objects.

    The parser keeps every token (`keep_all_tokens`), so a node's span runs from its first token
    to its last, as written; `[x]` that is absent arrives as None (`maybe_placeholders`).
    """

    file = "<string>"
    source = ""

    def _span(self, first: Token, items: list) -> Span:
        last = items[-1]
        if last is None:  # an absent `[x]` at the end
            last = next(x for x in reversed(items) if x is not None)
        if isinstance(last, _Part):
            last = last.last
        end = (
            (last.end_line, last.end_column)
            if isinstance(last, Token)
            else (last.span.end_line, last.span.end_col)
        )
        return Span(self.file, first.line, first.column, *end)

    def _id(self, tok: Token) -> n.Ident:
        return n.Ident(str(tok), _tok_span(self.file, tok))

    def _number(self, tok: Token) -> int | float:
        try:
            return int(tok) if _INTEGER.fullmatch(tok) else float(tok)
        except ValueError:  # e.g. more digits than Python converts
            raise SrpoError(
                [Diagnostic("E001", f"invalid number `{tok[:16]}...`", _tok_span(self.file, tok))]
            ) from None

    def _count(self, tok: Token) -> int:
        """A count or index: a whole number, else an error at the token."""
        if not _WHOLE.fullmatch(tok):
            raise SrpoError(
                [Diagnostic("E001", f"expected a whole number, found `{tok}`", _tok_span(self.file, tok))]
            )
        return int(self._number(tok))

    # values
    def string(self, items: list) -> _Part:
        return _Part(_UNESCAPE.sub(r"\1", items[0][1:-1]), items[0])

    def signed(self, items: list) -> _Part:
        return _Part(self._number(items[0]), items[0])

    def true(self, items: list) -> _Part:
        return _Part(True, items[0])

    def false(self, items: list) -> _Part:
        return _Part(False, items[0])

    def symbol(self, items: list) -> _Part:
        return _Part(n.Symbol(str(items[0])), items[0])

    def kwarg(self, items: list) -> n.Option:  # NAME "=" value
        return n.Option(str(items[0]), items[2].value, self._span(items[0], items))

    def arg(self, items: list) -> n.Option:  # value | kwarg
        item = items[0]
        return (
            item if isinstance(item, n.Option) else n.Option(None, item.value, self._span(item.last, items))
        )

    def call(self, items: list) -> n.Call:  # NAME "(" [arg ("," arg)*] ")"
        return n.Call(
            self._id(items[0]),
            tuple(a for a in items if isinstance(a, n.Option)),
            self._span(items[0], items),
        )

    def options(self, items: list) -> _Part:  # "with" "(" [kwarg ("," kwarg)*] ")", also `lora(...)`
        return _Part(tuple(o for o in items if isinstance(o, n.Option)), items[-1])

    lora = options

    def dotted(self, items: list) -> tuple[Span, tuple[str, ...]]:  # (NAME | TASK) ("." NAME)*
        return self._span(items[0], items), tuple(str(t) for t in items if t.type != "DOT")

    # declarations
    def workflow_decl(self, items: list) -> n.Ident:
        return self._id(items[1])

    def policy_decl(self, items: list) -> n.Policy:  # "policy" NAME "=" call [FROZEN] [lora] [options]
        _, name, _, call, frozen, lora, options = items
        return n.Policy(
            self._id(name),
            call,
            frozen is not None,
            lora.value if lora else None,
            options.value if options else (),
            self._span(items[0], items),
        )

    def task_decl(self, items: list) -> n.Task:  # TASK call
        return n.Task(items[1], self._span(items[0], items))

    def tool_decl(self, items: list) -> n.Tool:  # "tool" NAME "=" call
        return n.Tool(self._id(items[1]), items[3], self._span(items[0], items))

    def pool(self, items: list) -> _Part:  # "[" NUMBER "]"
        return _Part(self._count(items[1]), items[2])

    def contract(self, items: list) -> n.Contract:  # (NAME | ROUTE) ("(" [NAME ("," NAME)*] ")")?
        args = tuple(self._id(t) for t in items[1:] if t is not None and t.type == "NAME")
        return n.Contract(self._id(items[0]), args, self._span(items[0], items))

    def agent_decl(self, items: list) -> n.Agent:
        # "agent" NAME [pool] "uses" NAME "prompt" STRING "emits" contract [options]
        _, name, pool, _, policy, _, prompt, _, contract, options = items
        return n.Agent(
            self._id(name),
            pool.value if pool else 1,
            pool is not None,
            self._id(policy),
            _UNESCAPE.sub(r"\1", prompt[1:-1]),
            _tok_span(self.file, prompt),
            contract,
            options.value if options else (),
            self._span(items[0], items),
        )

    def penalty(self, items: list) -> _Part:  # "invalid" signed
        return _Part(float(items[1].value), items[1].last)

    def reward_decl(self, items: list) -> n.Reward:  # "reward" NAME "(" NAME "," dotted ")" [penalty]
        _, fn, _, agent, _, (field_span, field), _, penalty = items
        return n.Reward(
            self._id(fn),
            self._id(agent),
            field,
            field_span,
            penalty.value if penalty else 0.0,
            self._span(items[0], items),
        )

    def train_decl(self, items: list) -> n.Train:  # "train" options
        return n.Train(items[1].value, self._span(items[0], items))

    # steps
    def cond(self, items: list) -> n.Cond:  # NAME COMPARE NAME
        return n.Cond(self._id(items[0]), str(items[1]), self._id(items[2]), self._span(items[0], items))

    def route_step(self, items: list) -> n.Route:
        return n.Route(self._id(items[1]), self._span(items[0], items))

    def by_router(self, items: list) -> _Part:  # "by" NAME
        return _Part(("by", self._id(items[1])), items[1])

    def replicas(self, items: list) -> _Part:  # "[" NUMBER ("," NUMBER)* "]"
        return _Part(("replicas", tuple(self._count(t) for t in items if t.type == "NUMBER")), items[-1])

    def parallel_step(self, items: list) -> n.Parallel:  # "parallel" NAME [selector]
        kind, sel = items[2].value if items[2] else (None, None)
        return n.Parallel(
            self._id(items[1]),
            sel if kind == "by" else None,
            sel if kind == "replicas" else None,
            self._span(items[0], items),
        )

    def verify_step(self, items: list) -> n.Verify:
        return n.Verify(self._id(items[1]), self._span(items[0], items))

    replica = pool  # "[" NUMBER "]"

    def revise_step(self, items: list) -> n.Revise:  # "revise" NAME [replica]
        return n.Revise(self._id(items[1]), items[2].value if items[2] else 1, self._span(items[0], items))

    def aggregate_step(self, items: list) -> n.Aggregate:
        return n.Aggregate(self._id(items[1]), self._span(items[0], items))

    def call_step(self, items: list) -> n.CallTool:  # "call" NAME "on" NAME
        return n.CallTool(self._id(items[1]), self._id(items[3]), self._span(items[0], items))

    def bound(self, items: list) -> _Part:  # "at" "most" NUMBER
        return _Part(self._count(items[2]), items[2])

    def until(self, items: list) -> n.Cond:
        return items[1]

    def block(self, items: list) -> _Part:  # "{" step* "}"
        return _Part(tuple(items[1:-1]), items[-1])

    def else_block(self, items: list) -> _Part:
        return items[1]

    def repeat_step(self, items: list) -> n.Repeat:  # "repeat" [bound] block [until]
        _, bound, block, until = items
        return n.Repeat(bound.value if bound else None, block.value, until, self._span(items[0], items))

    def if_step(self, items: list) -> n.If:  # "if" cond block [else_block]
        _, cond, then, orelse = items
        return n.If(cond, then.value, orelse.value if orelse else (), self._span(items[0], items))

    def break_step(self, items: list) -> n.Break:  # "break" "if" cond
        return n.Break(items[2], self._span(items[0], items))

    def start(self, items: list) -> n.Program:
        name, *decls = items
        by_type: dict[type, list] = {}
        steps: list = []
        for d in decls:
            if isinstance(d, (n.Policy, n.Task, n.Tool, n.Agent, n.Reward, n.Train)):
                by_type.setdefault(type(d), []).append(d)
            else:
                steps.append(d)
        get = lambda t: tuple(by_type.get(t, ()))  # noqa: E731
        return n.Program(
            name,
            get(n.Policy),
            get(n.Task),
            get(n.Tool),
            get(n.Agent),
            get(n.Reward),
            get(n.Train),
            tuple(steps),
            self.file,
            self.source,
        )


_BUILDER = _Build()
_BUILDING = threading.Lock()  # the builder holds the file being parsed


@functools.lru_cache(maxsize=1)
def _build_parser() -> Lark:
    """The fast pipeline: one-regex lexer, LALR parser, nodes built as rules reduce (no parse tree)."""
    return Lark(
        grammar_text(),
        parser="lalr",
        lexer=ScanLexer,
        keep_all_tokens=True,
        maybe_placeholders=True,
        transformer=_BUILDER,
        cache=True,
    )


_STEP_WORDS = {
    f"`{w}`" for w in ("route", "parallel", "verify", "revise", "aggregate", "call", "repeat", "if", "break")
}
_STATEMENT_TOKENS = {
    w.upper()
    for w in (
        "workflow",
        "policy",
        "task",
        "tool",
        "agent",
        "reward",
        "train",
        "route",
        "parallel",
        "verify",
        "revise",
        "aggregate",
        "call",
        "repeat",
        "if",
        "break",
        "RBRACE",
    )
}
_DECL_WORDS = {f"`{w}`" for w in ("policy", "task", "tool", "agent", "reward", "train")}


def _situation(err: UnexpectedToken) -> int:
    """Where the parser stood (its LR state); equal states, equal mistakes."""
    return err.interactive_parser.parser_state.state_stack[-1]


@functools.lru_cache(maxsize=1)
def _example_labels() -> dict[int, tuple[str, str]]:
    """Like Lark's `match_examples`, keyed by the LR state alone: context before the error does not matter."""
    labels: dict[int, tuple[str, str]] = {}
    for label, examples in _EXAMPLES.items():
        for example in examples:
            try:
                lark_parser().parse(example)
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
    names = {_describe(t, parser) for t in accepts}
    for group, label in ((_STEP_WORDS, "a step"), (_DECL_WORDS, "a declaration")):
        if group <= names:
            names = (names - group) | {label}
    words = sorted(names, key=lambda w: (not w.startswith("`"), w))
    if not words:
        return ""
    if len(words) > 8:
        return f" (expected one of {len(words)} things, e.g. {', '.join(words[:6])})"
    return " (expected " + (words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]) + ")"


def _found(err: UnexpectedInput) -> str:
    if isinstance(err, UnexpectedCharacters):
        return f"unexpected character `{err.char}`"
    if isinstance(err, UnexpectedEOF) or (isinstance(err, UnexpectedToken) and err.token.type == "$END"):
        return "unexpected end of file"
    tok = err.token  # type: ignore[attr-defined]
    return f"unexpected `{tok}`"


def _diagnostic(err: UnexpectedInput, file: str, text: str, parser: Lark) -> Diagnostic:
    line, col = max(1, getattr(err, "line", 1) or 1), max(1, getattr(err, "column", 1) or 1)
    if isinstance(err, UnexpectedEOF) or (isinstance(err, UnexpectedToken) and err.token.type == "$END"):
        lines = text.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
        width = 1
    elif isinstance(err, UnexpectedToken):
        width = max(1, len(str(err.token)))
    else:
        width = 1
    span = Span(file, line, col, line, col + width)
    code, hint = (
        (
            "E003"
            if "end of file" in _found(err)
            else "E002"
            if isinstance(err, UnexpectedCharacters)
            else "E001"
        ),
        None,
    )
    if isinstance(err, UnexpectedCharacters) and err.char == '"':
        return Diagnostic("E002", "unterminated string", span, 'close the string with `"` on the same line')
    label = _example_labels().get(_situation(err)) if isinstance(err, UnexpectedToken) else None
    if label is not None:
        code, hint = label
    return Diagnostic(code, _found(err) + _expected(err, parser), span, hint)


_RESUME = re.compile(
    r"^\s*(workflow|policy|task|tool|agent|reward|train|route|parallel|verify|revise|aggregate|"
    r"call|repeat|if|break|\}|#|$)"
)


def _blank_from(text: str, line: int) -> str:
    """Blank the erroneous statement: from `line` up to the next line that starts a statement."""
    lines = text.split("\n")
    i = line - 1
    end = i + 1
    while end < len(lines) and not _RESUME.match(lines[end]):
        end += 1
    for k in range(i, min(end, len(lines))):
        lines[k] = re.sub(r"\S", " ", lines[k])
    return "\n".join(lines)


def syntax_errors(text: str, file: str = "<string>") -> list[Diagnostic]:
    """Every syntax error found (up to a limit), resuming after each at the next statement when safe."""
    parser = lark_parser()
    diags: list[Diagnostic] = []
    work = text
    while len(diags) < MAX_PARSE_ERRORS:
        try:
            parser.parse(work)
            break
        except UnexpectedInput as err:
            diag = _diagnostic(err, file, text, parser)
            if diags and (diag.span.line, diag.span.col) <= (diags[-1].span.line, diags[-1].span.col):
                break  # no progress: recovery would only repeat itself
            diags.append(diag)
            if diag.code == "E003" or (
                isinstance(err, UnexpectedToken) and err.token.type in _STATEMENT_TOKENS
            ):
                break  # the statement before is unfinished: no safe place to resume
            recovered = _blank_from(work, diag.span.line)
            if recovered == work or recovered.count("{") != work.count("{"):
                break  # blanking would unbalance the braces: later errors would be noise
            work = recovered
    return diags


def parse(text: str, file: str = "<string>") -> n.Program:
    """Parse a workflow; raise `SrpoError` with every syntax error found (up to a limit).

    Well-formed text takes the fast pipeline; text it rejects is parsed again by Lark's own
    pipeline, which finds and explains the syntax errors.
    """
    try:
        with _BUILDING:
            _BUILDER.file, _BUILDER.source = file, text
            return _build_parser().parse(text)
    except UnexpectedInput:
        literal_error = None
    except SrpoError as err:  # a malformed literal: report it unless there are syntax errors
        literal_error = err
    diags = syntax_errors(text, file)
    if diags:
        raise SrpoError(diags)
    assert literal_error is not None, "the two pipelines disagree on the syntax"
    raise literal_error


def parse_file(path: str | Path) -> n.Program:
    path = Path(path)
    return parse(path.read_text(encoding="utf-8"), str(path))
