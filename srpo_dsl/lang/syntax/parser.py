"""Text -> typed syntax tree: nodes built as Lark's LALR parser reduces each rule (no parse tree)."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias, TypeVar, cast

from lark import Lark, Token
from lark.exceptions import UnexpectedInput

from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.grammar import grammar_text
from srpo_dsl.lang.syntax.lexer import ScanLexer, token_span
from srpo_dsl.lang.syntax.messages import Diagnostic, Span, SrpoError, without_bom
from srpo_dsl.lang.syntax.nesting import too_deep
from srpo_dsl.lang.syntax.syntax_errors import syntax_errors

_UNESCAPE = re.compile(r"\\(.)")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_WHOLE = re.compile(r"[0-9]+")

# The largest loop bound and pool size. Each counts model calls in one episode (rounds of a loop,
# replicas of an event); ten thousand is already beyond any episode's budget, so a larger count
# is a typo (and a pool's replica slots are materialised: `agent s[10**20]` could not be built).
MAX_COUNT = 10_000


class _Part(NamedTuple):
    """A piece of a rule that is not a node (a block, a selector, a `[N]`), with its closing token."""

    value: object
    last: Token | n.Contract  # a list of contracts ends at its last contract


# Lark hands each callback the children of the rule it reduced: tokens, the nodes and `_Part`s that
# earlier callbacks built, None for an absent `[x]`. Which child sits where is the grammar's to say
# (each callback's comment quotes its rule); a callback unpacks them by position.
_Children: TypeAlias = list[Any]
_T = TypeVar("_T")


def _unquote(tok: Token) -> str:
    return _UNESCAPE.sub(r"\1", tok[1:-1])


def _listed(parts: Sequence[object], kind: type[_T]) -> tuple[_T, ...]:
    """The items of a comma-separated list: its commas and the placeholder of an empty list dropped."""
    return tuple(p for p in parts if isinstance(p, kind))


class _Build:
    """Lark's callbacks, one per rule: the rule's parts (tokens, sub-results) -> `nodes` objects.

    Each callback unpacks its parts into names, in the order the rule writes them: a rule whose
    shape changes fails loudly here. The parser keeps every token (`keep_all_tokens`), so a node's
    span runs from its first token to its last, as written; `[x]` that is absent arrives as None
    (`maybe_placeholders`).
    """

    file = "<string>"
    source = ""

    def _span(self, parts: _Children | tuple[Token]) -> Span:
        """From the first part (a token) to the last one present."""
        first, last = token_span(self.file, parts[0]), parts[-1]
        if last is None:  # an absent `[x]` at the end
            last = next(p for p in reversed(parts) if p is not None)
        if isinstance(last, _Part):
            last = last.last
        end = token_span(self.file, last) if isinstance(last, Token) else last.span
        return Span(self.file, first.line, first.col, end.end_line, end.end_col)

    def _id(self, tok: Token) -> n.Ident:
        return n.Ident(str(tok), token_span(self.file, tok))

    def _number(self, tok: Token) -> int | float:
        try:
            return int(tok) if _INTEGER.fullmatch(tok) else float(tok)
        except ValueError:  # e.g. more digits than Python converts
            raise SrpoError(
                [Diagnostic("E001", f"invalid number `{tok[:16]}...`", token_span(self.file, tok))]
            ) from None

    def _count(self, tok: Token) -> int:
        """A count or index: a whole number, else an error at the token."""
        if not _WHOLE.fullmatch(tok):
            raise SrpoError(
                [Diagnostic("E001", f"expected a whole number, found `{tok}`", token_span(self.file, tok))]
            )
        return int(self._number(tok))

    def _at_most(self, tok: Token, code: str, what: str) -> int:
        """A count no larger than `MAX_COUNT`, else `code` at the number."""
        count = self._count(tok)
        if count > MAX_COUNT:
            raise SrpoError(
                [
                    Diagnostic(
                        code,
                        f"{what} must be at most {MAX_COUNT}, not {tok}",
                        token_span(self.file, tok),
                        f"it counts model calls in one episode: more than {MAX_COUNT} is a typo",
                    )
                ]
            )
        return count

    # values
    def string(self, items: _Children) -> _Part:
        (tok,) = items
        return _Part(_unquote(tok), tok)

    def signed(self, items: _Children) -> _Part:
        (tok,) = items
        return _Part(self._number(tok), tok)

    def true(self, items: _Children) -> _Part:
        (tok,) = items
        return _Part(True, tok)

    def false(self, items: _Children) -> _Part:
        (tok,) = items
        return _Part(False, tok)

    def symbol(self, items: _Children) -> _Part:
        (tok,) = items
        return _Part(n.Symbol(str(tok)), tok)

    def list_value(self, items: _Children) -> _Part:  # "[" [value ("," value)*] "]"
        *listed, close = items
        return _Part(tuple(p.value for p in listed if isinstance(p, _Part)), close)

    def kwarg(self, items: _Children) -> n.Option:  # NAME "=" value
        name, _eq, value = items
        return n.Option(str(name), value.value, self._span(items), token_span(self.file, value.last))

    def arg(self, items: _Children) -> n.Option:  # value | kwarg
        (item,) = items
        if isinstance(item, n.Option):
            return item
        span = self._span((item.last,))
        return n.Option(None, item.value, span, span)

    def _callee(self, tok: Token) -> n.Ident | n.Ref:
        """A built-in name, or a quoted Python reference."""
        if tok.type == "STRING":
            return n.Ref(_unquote(tok), token_span(self.file, tok))
        return self._id(tok)

    def call(self, items: _Children) -> n.Call:  # (NAME | STRING) "(" [arg ("," arg)*] ")"
        kind, _open, *listed, _close = items
        return n.Call(self._callee(kind), _listed(listed, n.Option), self._span(items))

    def options(self, items: _Children) -> _Part:  # "with" "(" [kwarg ("," kwarg)*] ")", also `lora(...)`
        _with, _open, *listed, close = items
        return _Part(_listed(listed, n.Option), close)

    lora = options

    def dotted(self, items: _Children) -> tuple[Span, tuple[str, ...]]:  # (NAME | TASK) ("." NAME)*
        names = [t for t in items if t.type != "DOT"]
        return self._span(items), tuple(map(str, names))

    # declarations
    def workflow_decl(self, items: _Children) -> n.Ident:
        _workflow, name = items
        return self._id(name)

    def policy_decl(self, items: _Children) -> n.Policy:  # "policy" NAME "=" call [FROZEN] [lora] [options]
        _policy, name, _eq, call, frozen, lora, options = items
        return n.Policy(
            self._id(name),
            call,
            frozen is not None,
            lora.value if lora else None,
            options.value if options else (),
            self._span(items),
        )

    def task_decl(self, items: _Children) -> n.Task:  # TASK call
        _task, call = items
        return n.Task(call, self._span(items))

    def tool_decl(self, items: _Children) -> n.Tool:  # "tool" NAME "=" call
        _tool, name, _eq, call = items
        return n.Tool(self._id(name), call, self._span(items))

    def env_decl(self, items: _Children) -> n.Env:  # "env" NAME "=" call [env_emits]
        _env, name, _eq, call, emits = items
        return n.Env(self._id(name), call, self._span(items), emits.value if emits else ())

    def env_emits(self, items: _Children) -> _Part:  # "emits" contract ("," contract)*
        _emits, *listed = items
        contracts = _listed(listed, n.Contract)
        return _Part(contracts, contracts[-1])

    def pool(self, items: _Children) -> _Part:  # "[" NUMBER "]"
        _open, number, close = items
        return _Part(self._at_most(number, "E040", "a pool's replica count"), close)

    def contract(self, items: _Children) -> n.Contract:  # (NAME | step_keyword) ("(" [NAME ("," NAME)*] ")")?
        name, *in_parens = items
        args = tuple(self._id(t) for t in in_parens if t is not None and t.type == "NAME")
        return n.Contract(self._id(name), args, self._span(items))

    def code_contract(self, items: _Children) -> n.Contract:  # STRING ["(" NAME ("," NAME)* ")"]
        ref, *in_parens = items
        args = tuple(self._id(t) for t in in_parens if t is not None and t.type == "NAME")
        return n.Contract(self._callee(ref), args, self._span(items))

    def agent_decl(self, items: _Children) -> n.Agent:
        # "agent" NAME [pool] "uses" NAME "prompt" STRING [system] "emits" contract [options]
        _agent, name, pool, _uses, policy, _prompt, prompt, system, _emits, contract, options = items
        return n.Agent(
            self._id(name),
            pool.value if pool else 1,
            pool is not None,
            self._id(policy),
            _unquote(prompt),
            token_span(self.file, prompt),
            contract,
            options.value if options else (),
            self._span(items),
            _unquote(system.last) if system else None,
            token_span(self.file, system.last) if system else None,
        )

    def system(self, items: _Children) -> _Part:  # "system" STRING
        _system, template = items
        return _Part(_unquote(template), template)

    def penalty(self, items: _Children) -> _Part:  # "invalid" signed
        _invalid, value = items
        return _Part(float(value.value), value.last)

    def reward_decl(self, items: _Children) -> n.Reward:
        # "reward" (NAME | STRING) "(" NAME ["," dotted] ")" [penalty]
        _reward, fn, _open, agent, _comma, dotted, _close, penalty = items
        field_span, field = dotted if dotted is not None else (None, None)
        return n.Reward(
            self._callee(fn),
            self._id(agent),
            field,
            field_span,
            penalty.value if penalty else 0.0,
            self._span(items),
        )

    def env_reward_decl(self, items: _Children) -> n.Reward:  # "reward" NAME [penalty]
        _reward, env, penalty = items
        return n.Reward(self._id(env), None, None, None, penalty.value if penalty else 0.0, self._span(items))

    def train_decl(self, items: _Children) -> n.Train:  # "train" options
        _train, options = items
        return n.Train(options.value, self._span(items))

    # steps
    def cond(self, items: _Children) -> n.Cond:  # NAME ["." NAME] COMPARE NAME
        agent, _dot, field, op, word = items
        at = field and self._id(field)
        return n.Cond(self._id(agent), str(op), self._id(word), self._span([agent, op, word]), at)

    def by_router(self, items: _Children) -> _Part:  # "by" NAME
        _by, router = items
        return _Part(self._id(router), router)

    def replicas(self, items: _Children) -> _Part:  # "[" NUMBER ("," NUMBER)* "]"
        _open, *listed, close = items
        return _Part(tuple(self._count(t) for t in listed if t.type == "NUMBER"), close)

    def only(self, items: _Children) -> _Part:  # "only" NAME ("," NAME)*
        _only, *listed = items
        names = [t for t in listed if t.type == "NAME"]
        return _Part(tuple(self._id(t) for t in names), names[-1])

    def branch(self, items: _Children) -> _Part:  # "branch" NUMBER [CROSS] ["keep" NAME] ["by" scorer]
        word, count, cross, _keep, keep, _by, scorer = items
        last = keep or cross or count
        end = scorer.span if scorer else token_span(self.file, last)
        span = Span(self.file, word.line, word.column, end.end_line, end.end_col)
        number = self._at_most(count, "E056", "a branch count")
        keeps = self._id(keep) if keep else None
        crossed = token_span(self.file, cross) if cross else None
        branch = n.Branch(number, keeps, scorer, span, token_span(self.file, count), crossed)
        return _Part(branch, last)

    def code_scorer(self, items: _Children) -> n.Scorer:  # STRING
        (ref,) = items
        return n.Scorer(self._callee(ref), None, token_span(self.file, ref))

    def scorer(self, items: _Children) -> n.Scorer:  # NAME "(" dotted ")"
        fn, _open, dotted, _close = items
        return n.Scorer(self._id(fn), dotted[1], self._span(items))

    def event_step(self, items: _Children) -> n.EventStep:  # step_keyword NAME [selector] [only] [branch]
        keyword, agent, selector, only, branch = items
        chosen = selector.value if selector else None
        return n.EventStep(
            str(keyword),
            self._id(agent),
            chosen if isinstance(chosen, n.Ident) else None,
            chosen if isinstance(chosen, tuple) else None,
            self._span_to(items, branch),
            only.value if only else None,
            branch=branch.value if branch else None,
        )

    def mixed_step(self, items: _Children) -> n.EventStep:  # step_keyword NAME ("," NAME)+ [branch]
        keyword, *names, branch = items
        agents = [self._id(t) for t in names if isinstance(t, Token) and t.type == "NAME"]
        span = self._span_to([keyword, *names, branch], branch)
        return n.EventStep(
            str(keyword),
            agents[0],
            None,
            None,
            span,
            None,
            tuple(agents[1:]),
            branch.value if branch else None,
        )

    def _span_to(self, items: _Children, branch: _Part | None) -> Span:
        """A step's span, through its `branch ...` clause when it has one."""
        if branch is None:
            return self._span(items)
        first = token_span(self.file, items[0])
        assert isinstance(branch.value, n.Branch)  # the `branch` callback's part
        end = branch.value.span
        return Span(self.file, first.line, first.col, end.end_line, end.end_col)

    def call_step(self, items: _Children) -> n.CallTool:  # "call" NAME "on" NAME
        _call, tool, _on, agent = items
        return n.CallTool(self._id(tool), self._id(agent), self._span(items))

    def env_step(self, items: _Children) -> n.EnvStep:  # "step" NAME [env_on]
        _step, env, on = items
        return n.EnvStep(self._id(env), on.value if on else (), self._span(items))

    def env_on(self, items: _Children) -> _Part:  # "on" NAME ("," NAME)*
        _on, *listed = items
        names = [t for t in listed if t.type == "NAME"]
        return _Part(tuple(self._id(t) for t in names), names[-1])

    def bound(self, items: _Children) -> _Part:  # "at" "most" NUMBER
        _at, _most, number = items
        return _Part(self._at_most(number, "E051", "a loop bound"), number)

    def until(self, items: _Children) -> n.Cond:  # "until" cond
        cond: n.Cond
        _until, cond = items
        return cond

    def block(self, items: _Children) -> _Part:  # "{" step* "}"
        _open, *steps, close = items
        return _Part(tuple(steps), close)

    def else_block(self, items: _Children) -> _Part:  # "else" block
        block: _Part
        _else, block = items
        return block

    def repeat_step(self, items: _Children) -> n.Repeat:  # "repeat" [bound] block [until]
        _repeat, bound, block, until = items
        return n.Repeat(bound.value if bound else None, block.value, until, self._span(items))

    def if_step(self, items: _Children) -> n.If:  # "if" cond block [else_block]
        _if, cond, then, orelse = items
        return n.If(cond, then.value, orelse.value if orelse else (), self._span(items))

    def break_step(self, items: _Children) -> n.Break:  # "break" "if" cond
        _break, _if, cond = items
        return n.Break(cond, self._span(items))

    def start(self, items: _Children) -> n.Program:  # workflow_decl item*
        name, *parts = items
        return n.Program(
            name,
            _listed(parts, n.Policy),
            _listed(parts, n.Task),
            _listed(parts, n.Tool),
            _listed(parts, n.Agent),
            _listed(parts, n.Reward),
            _listed(parts, n.Train),
            tuple(p for p in parts if isinstance(p, n.Step)),
            self.file,
            self.source,
            _listed(parts, n.Env),
        )


_BUILDER = _Build()
_BUILDING = threading.Lock()  # the builder holds the file being parsed


def _build_parser() -> Lark:
    """The fast pipeline: one-regex lexer, LALR parser, nodes built as rules reduce (no parse tree)."""
    return _parser_for(grammar_text())


@functools.lru_cache(maxsize=4)
def _parser_for(grammar: str) -> Lark:
    return Lark(
        grammar,
        parser="lalr",
        lexer=ScanLexer,
        keep_all_tokens=True,
        maybe_placeholders=True,
        transformer=_BUILDER,
        cache=True,
    )


def parse(text: str, file: str = "<string>") -> n.Program:
    """Parse a workflow; raise `SrpoError` with every syntax error found (up to a limit).

    A leading byte-order mark is dropped first (positions count from the character after it).
    Well-formed text takes the fast pipeline; text it rejects is parsed again by Lark's own
    pipeline, which finds and explains the syntax errors. Blocks nested deeper than
    `nesting.MAX_NESTING` are refused (E008), so no later pass recurses too deep.
    """
    text = without_bom(text)
    try:
        program = fast_parse(text, file)
    except UnexpectedInput:
        literal_error = None
    except SrpoError as err:  # a malformed literal: report it unless there are syntax errors
        literal_error = err
    else:
        deep = too_deep(program.steps)
        if deep is not None:
            raise SrpoError([deep])
        return program
    diags = syntax_errors(text, file)
    if diags:
        raise SrpoError(diags)
    assert literal_error is not None, "the two pipelines disagree on the syntax"
    raise literal_error


def fast_parse(text: str, file: str) -> n.Program:
    """The fast pipeline alone: Lark's `UnexpectedInput` on a syntax error, `SrpoError` on a
    well-formed literal out of range (e.g. a negative count)."""
    with _BUILDING:
        _BUILDER.file, _BUILDER.source = file, text
        # the transformer's `start` callback builds the Program: Lark's stubs say a Tree
        return cast(n.Program, _build_parser().parse(text))


def parse_file(path: str | Path) -> n.Program:
    path = Path(path)
    return parse(path.read_text(encoding="utf-8"), str(path))
