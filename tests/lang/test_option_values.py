"""Option values written as docs/dsl.md writes them: every value an option takes (read off the option
schema, whose lists are the registries) validates clean, bare and quoted, and reaches the compiled graph;
every `name = value` example of docs/dsl.md parses to the value it shows."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from srpo_dsl.lang import analyze, parse
from srpo_dsl.lang.checks.schema import (
    POLICY_KINDS,
    TASK_KINDS,
    TOOL_KINDS,
    AgentOptions,
    Generation,
    LoraOptions,
    PythonEnv,
    PythonTool,
    TrainOptions,
    option_choices,
)
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lsp.completion import completions
from srpo_dsl.lsp.semantic import TOKEN_TYPES, semantic_ranges
from tests.support.clitools import ROOT, cli

DOCS = (ROOT / "docs" / "dsl.md").read_text(encoding="utf-8")

WORKFLOW = """workflow w
policy lm = builtin("tiny") lora({lora}) with ({policy})
task arith({task})
agent a[2] uses lm prompt "p.j2" emits act(answer) with ({agent})
agent b uses lm prompt "p.j2" emits boxed
act a
aggregate b
reward exact_match(b, task.answer)
train with ({train})
"""


@dataclass(frozen=True)
class Block:
    """An option block of WORKFLOW: its model, its slot, and where the compiled graph keeps its options."""

    model: type[BaseModel]
    slot: str
    compiled: Callable[[dict], dict]


BLOCKS = {
    "train with": Block(TrainOptions, "train", lambda g: g["train"]),
    "agent with": Block(AgentOptions, "agent", lambda g: g["agents"]["a"]),
    "policy with": Block(Generation, "policy", lambda g: g["policies"]["lm"]["generation"]),
    "lora": Block(LoraOptions, "lora", lambda g: g["policies"]["lm"]["lora"]),
    "arith": Block(TASK_KINDS["arith"].options, "task", lambda g: g["task"]["options"]),
}


def _values(model: type[BaseModel], name: str) -> list[tuple[str, object]]:
    """(the value as docs/dsl.md writes it, as the compiled graph holds it): each choice (a word bare and
    quoted; `true` and `false` bare), and the default when it is one."""
    choices = option_choices(model, name)
    if choices == ["true", "false"]:
        return [("true", True), ("false", False)]
    default = model.model_fields[name].default
    if not choices and isinstance(default, bool):
        return [(str(default).lower(), default)]
    if not choices and isinstance(default, (int, float)):
        return [(repr(default), default)]
    words = choices or ([default] if isinstance(default, str) else [])
    return [(form, w) for w in words for form in (w, f'"{w}"')]


CASES = [
    pytest.param(block, name, written, compiled, id=f"{label}-{name}={written}")
    for label, block in BLOCKS.items()
    for name in block.model.model_fields
    for written, compiled in _values(block.model, name)
]


def workflow(**slots: str) -> str:
    return WORKFLOW.format(**{b.slot: "" for b in BLOCKS.values()} | slots)


def analyzed(folder: Path, text: str):
    (folder / "p.j2").write_text("{{ task.question }}")
    return analyze(text, str(folder / "w.srpo"), [folder])


@pytest.mark.parametrize(("block", "name", "written", "compiled"), CASES)
def test_every_value_validates_clean_and_reaches_the_graph(tmp_path, block, name, written, compiled):
    result = analyzed(tmp_path, workflow(**{block.slot: f"{name} = {written}"}))
    found = [(d.code, d.message) for d in result.diagnostics]
    no_key = block.slot == "train" and name == "advantage" and compiled == "state"  # WORKFLOW has no env
    assert [c for c, _ in found] == ["W008"] if no_key else found == []
    assert block.compiled(result.graph.graph)[name] == compiled


def test_the_words_that_spell_keywords_are_among_the_cases():
    """What this file is for: `advantage = agent` was E001 (`agent` is a keyword), `token-mean` E002."""
    written = {(p.values[1], p.values[2]) for p in CASES}
    assert {("advantage", "agent"), ("aggregation", "token-mean"), ("targets", "all-linear")} <= written
    assert {("mix", "graded"), ("stop", "replica"), ("report_to", "none"), ("set_norm", "none")} <= written


def test_every_option_that_takes_a_word_from_a_list_is_a_case():
    """A block, a kind or an option added with choices gets its cases here, or this test says which."""
    covered = {(b.model, name) for b in BLOCKS.values() for name in b.model.model_fields}
    models = [*(b.model for b in BLOCKS.values()), PythonTool, PythonEnv]
    models += [kind.options for kinds in (POLICY_KINDS, TASK_KINDS, TOOL_KINDS) for kind in kinds.values()]
    with_choices = {(m, name) for m in models for name in m.model_fields if option_choices(m, name)}
    builtin = {(POLICY_KINDS["builtin"].options, "name")}  # `builtin("tiny")`: the next test
    builtin.add((POLICY_KINDS["hf"].options, "tool_format"))  # test_tool_schemas.py, each format
    assert with_choices - covered == builtin


@pytest.mark.parametrize("written", ['"tiny"', "tiny"])
def test_the_builtin_models_name_bare_and_quoted(tmp_path, written):
    result = analyzed(tmp_path, workflow().replace('builtin("tiny")', f"builtin({written})"))
    assert result.diagnostics == [] and result.graph.graph["policies"]["lm"]["model"] == "builtin:tiny"


def test_every_word_an_option_takes_is_in_docs_dsl_md():
    """Each registered name, each `Literal` value, is written in the docs (`true` and `false` aside)."""
    missing = [
        f"{name} = {w}"
        for b in BLOCKS.values()
        for name in b.model.model_fields
        for w in option_choices(b.model, name)
        if w not in ("true", "false") and f"`{w}`" not in DOCS and f"{name} = {w}" not in DOCS
    ]
    assert not missing


def test_fmt_keeps_such_values_and_is_idempotent(tmp_path):
    path = tmp_path / "w.srpo"
    path.write_text(workflow(train="advantage=agent,aggregation = token-mean", lora='targets="all-linear"'))
    assert cli("fmt", path).returncode == 0
    once = path.read_text()
    assert "train with (advantage = agent, aggregation = token-mean)" in once
    assert 'lora(targets = "all-linear")' in once
    assert cli("fmt", "--check", path).returncode == 0 and path.read_text() == once


# ---- the examples of docs/dsl.md -------------------------------------------------------------------------
_VALUE = r'"(?:[^"\\\n]|\\.)*"|[+-]?[0-9][0-9.eE+-]*|[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z_][A-Za-z0-9_]*)*'
_OPTION = re.compile(rf"\b([a-z_][a-z0-9_]*) = ({_VALUE})(?=\s*[,)]|\s*$|\s+#)", re.MULTILINE)


def _srpo_code() -> list[str]:
    """docs/dsl.md's workflow code: the lines of its code blocks but Python's, and its inline code (where
    `name = value`, spaced, is an option: Python's keyword arguments are written `name=value`)."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", DOCS, re.MULTILINE | re.DOTALL)
    lines = [line for lang, body in blocks if lang != "python" for line in body.splitlines()]
    prose = re.sub(r"^```.*?^```", "", DOCS, flags=re.MULTILINE | re.DOTALL)
    return lines + re.findall(r"`([^`\n]+)`", prose)


def _as_written(value: str) -> object:
    """The value the text shows: a string's contents, a number, `true`/`false`, or a word."""
    if value.startswith('"'):
        return value[1:-1]
    if value in ("true", "false"):
        return value == "true"
    if re.fullmatch(r"[+-]?[0-9].*", value):
        return float(value) if re.search(r"[.eE]", value) else int(value)
    return n.Symbol(value)


EXAMPLES = sorted({m.groups() for code in _srpo_code() for m in _OPTION.finditer(code)})


def test_the_examples_are_found():
    assert len(EXAMPLES) > 40
    found = {f"{k} = {v}" for k, v in EXAMPLES}
    assert {"objective = srpo", "advantage = agent", "aggregation = token-mean", "stop = replica"} <= found
    assert {'observe = "observe.j2"', "lr = 1e-6", "trained = false", "targets = all-linear"} <= found
    assert {'targets = "all-linear"', 'mix = "sums"', "calls = 2", "top_p = 1.0"} <= found


@pytest.mark.parametrize(("name", "value"), EXAMPLES, ids=[f"{k}={v}" for k, v in EXAMPLES])
def test_every_option_example_of_docs_dsl_md_parses(name, value):
    program = parse(f"workflow w\ntrain with ({name} = {value})\n")
    (option,) = program.trains[0].options
    assert (option.name, option.value) == (name, _as_written(value))


# ---- the language server -----------------------------------------------------------------------------------
def test_completion_offers_no_keyword_where_a_value_is_written():
    for before in ("policy lm = hf(", "task arith(n = 1, "):
        labels = {c.label for c in completions(f"workflow w\n{before}", 1, len(before))}
        assert {"true", "false"} <= labels and not labels & {"agent", "policy", "route", "with"}
    labels = {c.label for c in completions("workflow w\ntrain with (advantage = ", 1, 24)}
    assert labels == {"event", "row", "agent", "episode", "state"}


def test_a_values_word_is_an_enum_member_not_a_keyword():
    text = "workflow w\ntrain with (advantage = agent, aggregation = token-mean, pack_rows = true)\n"
    legend = {(r.start.line, r.start.character): kind for r, kind in semantic_ranges(text)}
    assert TOKEN_TYPES[legend[1, 24]] == "enumMember"  # agent
    assert TOKEN_TYPES[legend[1, 45]] == "enumMember"  # token-mean
    assert TOKEN_TYPES[legend[1, 69]] == "keyword"  # true
    assert TOKEN_TYPES[legend[1, 0]] == "keyword"  # train
