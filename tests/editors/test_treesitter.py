"""The tree-sitter grammar of .srpo files (editors/neovim/tree-sitter-srpo): grammar.js and
queries/highlights.scm are the ones generated from the Lark grammar (`srpo_dsl.lang.tooling.treesitter`).

No tree-sitter CLI can be installed here (npm's tree-sitter-cli downloads its binary at install time,
and Debian bookworm does not package it), so its parser is not generated in these tests. Instead
grammar.js is loaded under node as `tree-sitter generate` first loads it (test/rules.js), and its rule
tree is checked: every symbol defined, every keyword of the language a literal; the tree is turned
back into a Lark grammar and LALR(1)-parses every shipped workflow (a grammar LALR(1) accepts without
conflicts is conflict-free for tree-sitter's LR(1) generator too); the highlight queries name only
nodes and literals of the grammar.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from lark import Lark

from srpo_dsl.lang.syntax.grammar import lark_parser
from srpo_dsl.lang.tooling.textmate import keywords
from srpo_dsl.lang.tooling.treesitter import files, main

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "editors" / "neovim" / "tree-sitter-srpo"
REGENERATE = "python -m srpo_dsl.lang.tooling.treesitter editors/neovim/tree-sitter-srpo"
REQUIRED = os.environ.get("SRPO_DSL_EDITOR_TESTS") == "required"


def test_the_shipped_files_are_the_generated_ones() -> None:
    for rel, text in files().items():
        assert (TS / rel).read_text(encoding="utf-8") == text, f"regenerate them: {REGENERATE}"


def test_main_writes_the_files(tmp_path) -> None:
    assert main([str(tmp_path)]) == 0
    assert {rel: (tmp_path / rel).read_text(encoding="utf-8") for rel in files()} == files()
    assert main([]) == 2


@pytest.fixture(scope="module")
def loaded() -> dict:
    if shutil.which("node") is None:
        if REQUIRED:
            pytest.fail("`node` is not installed, and SRPO_DSL_EDITOR_TESTS=required")
        pytest.skip("`node` is not installed")
    done = subprocess.run(["node", str(TS / "test" / "rules.js")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def walk(node: dict):
    yield node
    for child in node.get("members", []) + [node[k] for k in ("content",) if k in node]:
        yield from walk(child)


@pytest.mark.editor
def test_every_symbol_is_defined_and_every_keyword_is_a_literal(loaded) -> None:
    rules = loaded["rules"]
    assert next(iter(rules)) == "start" and loaded["word"]["name"] == "NAME"
    nodes = [n for rule in rules.values() for n in walk(rule)]
    assert {n["name"] for n in nodes if n["type"] == "SYMBOL"} <= set(rules)
    literals = {n["value"] for n in nodes if n["type"] == "STRING"}
    assert set(keywords().keywords) <= literals
    lark_rules = {r.origin.name.removeprefix("_") for r in lark_parser().rules}
    assert lark_rules == set(rules) - {t.name for t in lark_parser().terminals}
    assert all(n["members"] for n in nodes if n["type"] in ("SEQ", "CHOICE"))  # none matches nothing


def lark_text(loaded: dict) -> str:
    """grammar.js's rules as a Lark grammar: rules lower case, pattern rules terminals."""

    def expr(node: dict) -> str:
        kind = node["type"]
        if kind == "STRING":
            return json.dumps(node["value"])
        if kind == "PATTERN":
            return "/" + node["value"] + "/"
        if kind == "SYMBOL":
            return node["name"]
        if kind in ("FIELD", "ALIAS", "TOKEN", "PREC"):
            return expr(node["content"])
        joiner = " " if kind == "SEQ" else " | "
        return "(" + joiner.join(expr(m) for m in node["members"]) + ")"

    lines = []
    for name, rule in loaded["rules"].items():
        prec = next((n["value"] for n in walk(rule) if n["type"] == "PREC"), 0)
        lines.append(f"{name}{f'.{prec}' if prec else ''}: {expr(rule)}")
    return "\n".join([*lines, "%ignore /\\s+/", "%ignore COMMENT"])


@pytest.mark.editor
def test_the_grammar_parses_every_shipped_workflow(loaded) -> None:
    parser = Lark(lark_text(loaded), parser="lalr", lexer="basic")  # LALR(1): no conflicts
    shipped = sorted((ROOT / "workflows").glob("*.srpo"))
    assert len(shipped) >= 20
    for path in shipped:
        parser.parse(path.read_text(encoding="utf-8"))
    with pytest.raises(Exception, match="Unexpected"):
        parser.parse("workflow w\nagent = 3\n")


@pytest.mark.editor
def test_the_highlight_queries_name_nodes_and_literals_of_the_grammar(loaded) -> None:
    scm = (TS / "queries" / "highlights.scm").read_text(encoding="utf-8")
    body = "\n".join(line for line in scm.splitlines() if not line.startswith(";"))
    nodes = [n for rule in loaded["rules"].values() for n in walk(rule)]
    literals = {n["value"] for n in nodes if n["type"] == "STRING"}
    assert set(re.findall(r'"([^"]+)"', body)) <= literals
    aliases = {n["value"] for n in nodes if n["type"] == "ALIAS"}
    assert set(re.findall(r"\((\w+)", body)) <= set(loaded["rules"]) | aliases
    assert {"(true)", "(false)"} <= set(re.findall(r"\(\w+\)", body))  # `true` as a boolean value
    fields = {(rule, "name") for rule, r in loaded["rules"].items() for n in walk(r) if n["type"] == "FIELD"}
    assert set(re.findall(r"\((\w+) (name): ", body)) == fields
    captured = re.findall(r'"([^"]+)"', body)
    assert sorted(w for w in captured if w in keywords().keywords) == sorted(keywords().keywords)
