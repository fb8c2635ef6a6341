"""Tool schemas for chat templates: read with `ast` from the tool function's signature and docstring, in the
shape transformers' `get_json_schema` gives, and passed as `tools=[...]` to the model's chat template when
its policy has a `tool_format` (real templates: tests/data/chat_tokenizers)."""

from __future__ import annotations

import ast
import json

import pytest
from transformers import AutoTokenizer
from transformers.utils import get_json_schema

from srpo_dsl.api import load
from srpo_dsl.lang import analyze
from srpo_dsl.lang.checks.schema import TOOL_FORMATS
from srpo_dsl.lang.usercode.toolschema import python_tool_schema
from tests.support.tools import CHAT, TOOL, tool_workflow


def _one_item(query: str) -> str:
    """Look a word up in the dictionary,
    and say what it means.

    Args:
        query: The word to look up,
            in lower case.
    """
    return query


def test_a_batched_tools_schema_is_get_json_schemas_of_one_query():
    """The schema of `lookup(query: list[str], timeout)` is what transformers gives for a function of one
    `query: str` with the same docstring (srpo-dsl batches the queries; `timeout` is the binding's)."""
    fn = ast.parse(TOOL).body[1]
    ours = json.loads(python_tool_schema("_one_item", fn))
    theirs = get_json_schema(_one_item)
    theirs["function"].pop("return", None)
    assert ours == theirs


def test_annotations_map_to_json_types():
    fn = ast.parse(TOOL).body[2]
    prop = json.loads(python_tool_schema("pick", fn))["function"]["parameters"]["properties"]["choice"]
    assert prop == {"type": "string", "enum": ["a", "b"]}


def test_a_literal_json_cannot_hold_is_left_out_of_the_enum():
    """`Literal[b"b", 1j]` in a tool's annotation: no JSON value, so not in the schema (was a traceback from
    `json.dumps`, in `srpo-dsl check`)."""
    fn = ast.parse(
        "def pick(choice: \"list[Literal['a', b'b', 1j, None]]\") -> list[str]:\n    return choice\n"
    )
    prop = json.loads(python_tool_schema("pick", fn.body[0]))["function"]["parameters"]["properties"][
        "choice"
    ]
    assert prop == {"type": "string", "enum": ["a", None]}


def test_the_checker_reads_the_schema_into_the_agents_of_a_policy_with_a_tool_format(tmp_path):
    path = tool_workflow(tmp_path, "hermes", "hermes")
    result = analyze(path.read_text(), str(path), [tmp_path])
    assert result.ok, result.diagnostics
    (schema,) = result.program.agents["solver"].tools
    function = json.loads(schema)["function"]
    assert function["name"] == "lookup"
    assert function["description"] == "Look a word up in the dictionary,\nand say what it means."
    assert function["parameters"]["properties"] == {
        "query": {"type": "string", "description": "The word to look up, in lower case."}
    }
    plain = tool_workflow(tmp_path, "hermes", None)
    assert analyze(plain.read_text(), str(plain), [tmp_path]).program.agents["solver"].tools == ()


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
@pytest.mark.parametrize("quoted", [True, False])
def test_every_tool_format_validates_bare_and_quoted_and_reaches_the_graph(tmp_path, fmt, quoted):
    path = tool_workflow(tmp_path, "llama3_1" if fmt == "llama3" else "hermes", fmt)
    text = path.read_text() if quoted else path.read_text().replace(f'"{fmt}"', fmt)
    result = analyze(text, str(path), [tmp_path])
    assert result.diagnostics == []
    assert result.graph.graph["policies"]["lm"]["tool_format"] == fmt


def test_an_unknown_tool_format_is_an_option_error(tmp_path):
    path = tool_workflow(tmp_path, "hermes", "xml")
    result = analyze(path.read_text(), str(path), [tmp_path])
    assert not result.ok and any("tool_format" in d.message for d in result.diagnostics)


@pytest.mark.parametrize(
    ("folder", "fmt", "marker"),
    [
        ("hermes", "hermes", "<tools>"),
        ("qwen3", "hermes", "<tools>"),
        ("llama3_1", "llama3", '"name": "lookup"'),
    ],
)
def test_the_chat_template_is_given_the_tools(tmp_path, folder, fmt, marker):
    """The prompt's ids are the template's rendering of the user message with `tools=[schema]`."""
    tok = AutoTokenizer.from_pretrained(CHAT / folder)
    path = tool_workflow(tmp_path, folder, fmt)
    (tmp_path / "replies.json").write_text(json.dumps({"solver": ["<answer>4</answer>"]}))
    rollouts = load(path).run(limit=1, backend="scripted", models=tmp_path / "replies.json", progress=False)
    ids = rollouts.episodes[0].events[0].members[0].prompt_token_ids
    schema = json.loads(analyze(path.read_text(), str(path), [tmp_path]).program.agents["solver"].tools[0])
    text = tok.decode(ids)
    question = text[text.index("Define ") : text.index(".", text.index("Define "))]
    want = tok.apply_chat_template(
        [{"role": "user", "content": f"{question}."}],
        tools=[schema],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert ids == tok(want, add_special_tokens=False)["input_ids"]
    assert marker in text and "The word to look up" in text


@pytest.mark.parametrize(
    ("folder", "fmt", "ok"),
    [
        ("hermes", "hermes", True),
        ("qwen3", "hermes", True),
        ("llama3_1", "llama3", True),
        ("llama3_1", "hermes", False),
        ("hermes", "llama3", False),
    ],
)
def test_a_tool_format_is_checked_against_a_local_models_chat_template(tmp_path, folder, fmt, ok):
    """E018 at the option where the local model's template never writes the format's calls."""
    path = tool_workflow(tmp_path, folder, fmt)
    text = path.read_text()
    found = [
        (d.code, d.message, d.span.line, d.span.col) for d in analyze(text, str(path), [tmp_path]).diagnostics
    ]
    if ok:
        assert found == []
        return
    marker = {"hermes": "<tool_call>", "llama3": '"parameters"'}[fmt]
    col = text.splitlines()[1].index(f'"{fmt}"') + 1
    assert found == [
        (
            "E018",
            f"`tool_format = {fmt}`: the chat template of `{CHAT / folder}` never writes `{marker}`",
            2,
            col,
        )
    ]


def test_a_tool_format_on_a_model_not_on_this_machine_is_not_looked_up(tmp_path):
    path = tool_workflow(tmp_path, "hermes", "llama3")
    text = path.read_text().replace(str(CHAT / "hermes"), "Qwen/Qwen2.5-3B-Instruct")
    assert analyze(text, str(path), [tmp_path]).diagnostics == []
