"""The grammar (`grammar/srpo.lark`), its Lark parser, and what the front end reads off its rules.

The grammar is the one source of the syntax: which keywords start a step or a declaration is
read from its rules (the first terminal of each alternative of `step` and `item`), never listed
by hand. The two rules the file leaves open are made here: `step_keyword` of the step table's
keywords (`srpo_dsl.lang.syntax.steps`), so every parser is built for the kinds registered when it is
built, and `keyword` of every keyword (the file's and the step table's), which a value may spell.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lark import Lark
from lark.grammar import Symbol

from srpo_dsl.lang.syntax.steps import step_keywords

_LITERAL = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"')


@functools.lru_cache(maxsize=1)
def grammar_file() -> str:
    """The file: package data when installed, else the repository's `grammar/srpo.lark`."""
    packaged = resources.files("srpo_dsl").joinpath("_data/grammar/srpo.lark")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[3] / "grammar" / "srpo.lark").read_text(encoding="utf-8")


def grammar_text() -> str:
    """The grammar of the language as registered now: the file, and `step_keyword` from the step table."""
    return _with_steps(step_keywords())


@functools.lru_cache(maxsize=8)
def _with_steps(keywords: tuple[str, ...]) -> str:
    text = grammar_file()
    own = set(_LITERAL.findall(re.sub(r"//[^\n]*", "", text)))
    taken = set(keywords) & own
    if taken:
        raise ValueError(f"step keyword(s) {', '.join(sorted(taken))}: already a keyword of the language")
    return text + _rule("step_keyword", keywords) + _rule("keyword", sorted(own | set(keywords)))


def keywords() -> frozenset[str]:
    """Every keyword of the language as registered now (the file's and the step table's): never a name."""
    return frozenset(_LITERAL.findall(re.sub(r"//[^\n]*", "", grammar_text())))


def _rule(name: str, words: Sequence[str]) -> str:
    """`?name: "w1" | "w2" | ...`, a rule the file leaves open, inlined to the word's token."""
    return f"\n?{name}: " + " | ".join(f'"{w}"' for w in words) + "\n"


def lark_parser(strict: bool = False) -> Lark:
    """Lark's own pipeline (basic lexer, parse tree): what syntax errors are found and explained with."""
    return _lark_parser(grammar_text(), strict)


@functools.lru_cache(maxsize=4)
def _lark_parser(grammar: str, strict: bool) -> Lark:
    # `cache=True` stores the LALR tables in the temp folder, keyed by the grammar's hash (keywords included).
    return Lark(
        grammar, parser="lalr", lexer="basic", maybe_placeholders=True, strict=strict, cache=not strict
    )


@dataclass(frozen=True)
class Statements:
    """Terminal names (`ROUTE`, `AGENT`, `RBRACE`, ...) at the edges of statements, read off the rules."""

    steps: frozenset[str]  # the keywords that start a step (`route`, `repeat`, ...)
    declarations: frozenset[str]  # the keywords that start a declaration (`agent`, `task`, ...)
    boundaries: frozenset[str]  # those, `workflow`, and the `}` that closes a block
    step_kinds: frozenset[str]  # the keywords of the step table (`route`, `verify`, ...): `step_keyword`
    value_words: frozenset[str]  # the keywords a value may spell (`agent`): `keyword` less `boolean`


@functools.lru_cache(maxsize=4)
def statements(parser: Lark) -> Statements:
    """The statement keywords of `parser`'s grammar (`lark_parser()` for the language's own)."""
    rules: dict[str, list[Sequence[Symbol]]] = defaultdict(list)
    for rule in parser.rules:
        rules[rule.origin.name].append(rule.expansion)

    def first(name: str) -> frozenset[str]:
        """The terminals the rule `name` can start with (every statement starts with a keyword)."""
        out: set[str] = set()
        for expansion in rules[name]:
            head = expansion[0]
            out |= {head.name} if head.is_term else first(head.name)
        return frozenset(out)

    steps = first("step")
    items = first("item")
    closes = frozenset(expansion[-1].name for expansion in rules["block"])
    boundaries = items | first("workflow_decl") | closes
    words = first("keyword") - first("boolean")
    return Statements(steps, items - steps, boundaries, first("step_keyword"), words)
