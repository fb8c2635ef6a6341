"""The VS Code extension (editors/vscode): its TextMate grammar is the one generated from the Lark
grammar (`srpo_dsl.lang.tooling.textmate`), its regexes compile, and its manifest points at files that exist.

Tokenizing under node (vscode-textmate on Oniguruma) and packaging the .vsix: tests/editors/test_vscode_node.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from srpo_dsl.lang import STEP_KINDS, Shape, StepKind, register_step
from srpo_dsl.lang.syntax import grammar as lang_grammar
from srpo_dsl.lang.syntax.grammar import grammar_text, lark_parser
from srpo_dsl.lang.tooling.textmate import keywords, main, render
from srpo_dsl.lsp.files import TEMPLATE_SUFFIXES

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "editors" / "vscode"
TM = EXT / "syntaxes" / "srpo.tmLanguage.json"
REGENERATE = "python -m srpo_dsl.lang.tooling.textmate editors/vscode/syntaxes/srpo.tmLanguage.json"


def tm() -> dict:
    return json.loads(TM.read_text(encoding="utf-8"))


def test_the_checked_in_grammar_is_the_generated_one() -> None:
    assert TM.read_text(encoding="utf-8") == render(), f"regenerate it: {REGENERATE}"


def test_main_writes_the_file(tmp_path) -> None:
    out = tmp_path / "srpo.tmLanguage.json"
    assert main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
    assert main([]) == 2


def lark_keywords() -> set[str]:
    """The string terminals of the Lark grammar that NAME also matches (the lexer's keywords)."""
    name = next(t for t in lark_parser().terminals if t.name == "NAME").pattern.to_regexp()
    return {
        t.pattern.value
        for t in lark_parser().terminals
        if t.pattern.type == "str" and re.fullmatch(name, t.pattern.value)
    }


def test_every_keyword_of_the_lark_grammar_is_in_the_tm_grammar() -> None:
    words = lark_keywords()
    assert {"workflow", "agent", "repeat", "route", "true", "frozen", "task"} <= words
    assert set(keywords().keywords) == words
    assert set(keywords().steps) == set(STEP_KINDS)
    patterns = [re.compile(p) for _, p in regexes(tm())]
    missing = [w for w in words if not any(p.fullmatch(w) for p in patterns)]
    assert not missing, f"{missing}: regenerate it: {REGENERATE}"


def test_a_keyword_added_to_the_grammar_changes_the_generated_file(monkeypatch) -> None:
    file = lang_grammar.grammar_file()
    assert "     | step\n" in file
    extended = (
        file.replace("     | step\n", "     | step\n     | wibble_decl\n") + 'wibble_decl: "wibble" NAME\n'
    )
    lang_grammar._with_steps.cache_clear()
    monkeypatch.setattr(lang_grammar, "grammar_file", lambda: extended)
    try:
        assert "wibble" in keywords().keywords
        assert "wibble" in render() and render() != TM.read_text(encoding="utf-8")
    finally:
        monkeypatch.undo()
        lang_grammar._with_steps.cache_clear()
    assert "wibble" not in grammar_text() and "wibble" not in keywords().keywords


def test_a_registered_step_kind_is_a_step_keyword_of_the_generated_file() -> None:
    register_step(StepKind("wobble", frozenset({"singleton"}), None, ("feedback",), Shape("[", "]", "box")))
    try:
        assert "wobble" in keywords().steps
        assert "wobble" in render()
    finally:
        del STEP_KINDS["wobble"]
    assert "wobble" not in render()


def regexes(node, where="") -> list[tuple[str, str]]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("match", "begin", "end") and isinstance(value, str):
                found.append((f"{where}/{key}", value))
            else:
                found += regexes(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += regexes(value, f"{where}/{i}")
    return found


def test_the_regexes_compile() -> None:
    # The grammar keeps to the syntax Python's `re` and Oniguruma share (\b, (?:), (?<!...), classes).
    found = regexes(tm())
    assert len(found) >= 10
    for where, pattern in found:
        try:
            re.compile(pattern)
        except re.error as err:  # pragma: no cover - the message is the point
            pytest.fail(f"{where}: {pattern!r}: {err}")


def test_includes_name_rules_of_the_repository() -> None:
    grammar = tm()
    assert grammar["scopeName"] == "source.srpo"
    for inc in grammar["patterns"]:
        assert inc["include"].lstrip("#") in grammar["repository"]


def test_the_manifest_s_paths_exist_and_it_is_valid_json() -> None:
    manifest = json.loads((EXT / "package.json").read_text(encoding="utf-8"))
    assert manifest["name"] == "srpo-dsl"
    assert (EXT / manifest["main"]).is_file()
    assert manifest["engines"]["vscode"].startswith("^1.82")
    assert manifest["dependencies"]["vscode-languageclient"].startswith("^9")
    assert "@vscode/vsce package" in manifest["scripts"]["package"]
    language, templates = manifest["contributes"]["languages"]
    assert language["id"] == "srpo" and language["extensions"] == [".srpo"]
    assert templates["id"] == "jinja" and templates["extensions"] == list(TEMPLATE_SUFFIXES)
    assert '{ language: "jinja" }' in (EXT / "extension.js").read_text(encoding="utf-8")
    assert (EXT / language["configuration"]).is_file()
    (grammar,) = manifest["contributes"]["grammars"]
    assert grammar["language"] == "srpo" and grammar["scopeName"] == tm()["scopeName"]
    assert (EXT / grammar["path"]).resolve() == TM
    setting = manifest["contributes"]["configuration"]["properties"]["srpo.server.command"]
    assert setting["default"] == ["srpo-dsl", "lsp"]
    assert (EXT / "README.md").is_file()


def test_the_language_configuration() -> None:
    config = json.loads((EXT / "language-configuration.json").read_text(encoding="utf-8"))
    assert config["comments"]["lineComment"] == "#"
    assert {tuple(b) for b in config["brackets"]} == {("(", ")"), ("[", "]"), ("{", "}")}
    assert {p["open"] for p in config["autoClosingPairs"]} >= {"(", "[", "{", '"'}
    re.compile(config["folding"]["markers"]["start"])
    assert re.search(config["folding"]["markers"]["start"], "repeat at most 3 {")
    assert re.search(config["folding"]["markers"]["end"], "  }")


def test_extension_js_starts_the_configured_command_over_stdio() -> None:
    js = (EXT / "extension.js").read_text(encoding="utf-8")
    assert 'require("vscode-languageclient/node")' in js and "LanguageClient" in js
    assert ["srpo", "server.command"][1] in js and "TransportKind.stdio" in js
    assert 'language: "srpo"' in js and "showErrorMessage" in js
    assert "module.exports = { activate, deactivate }" in js
