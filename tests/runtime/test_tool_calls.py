"""Native tool calls (`tool_format`): Hermes/Qwen `<tool_call>{json}</tool_call>` and Llama 3's JSON object,
parsed into the agent's action; malformed calls are invalid actions with one line saying why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from srpo_dsl.api import load
from srpo_dsl.lang import analyze
from srpo_dsl.runtime.toolcalls import parse_native
from tests.support.tools import CHAT, call, tool_workflow

ACTIONS = ("lookup", "answer")


@pytest.mark.parametrize("fmt", ["hermes", "llama3"])
def test_a_call_is_the_tools_action_with_its_one_argument(fmt):
    parsed = parse_native(f"<think>a cat?</think>{call(fmt, query='cat')}", ACTIONS, fmt)
    assert parsed.valid and parsed.value == {"action": "lookup", "value": "cat"}
    assert parse_native(call(fmt, query=[1, 2]), ACTIONS, fmt).value == {
        "action": "lookup",
        "value": "[1, 2]",
    }


@pytest.mark.parametrize("fmt", ["hermes", "llama3"])
def test_a_reply_without_a_call_takes_the_final_action_by_its_tag(fmt):
    assert parse_native("It is <answer>4</answer>", ACTIONS, fmt).value == {"action": "answer", "value": "4"}
    assert not parse_native("It is 4", ACTIONS, fmt).valid


@pytest.mark.parametrize(
    ("fmt", "text", "error"),
    [
        ("hermes", '<tool_call>{"name": "lookup", </tool_call>', "malformed tool call: "),
        ("hermes", '<tool_call>{"name": "lookup"}', "unbalanced <tool_call> tags"),
        ("hermes", call("hermes", "answer", query="4"), "no tool named 'answer' (tools: lookup)"),
        ("hermes", call("hermes", query="a", extra="b"), 'exactly one argument in its "arguments"'),
        ("hermes", call("hermes", query="a") + "<answer>4</answer>", "a tool call and <answer> in one reply"),
        ("hermes", call("hermes", query="a") * 2, "at most 1 tool call(s) in one turn, found 2"),
        ("llama3", '{"name": "lookup", "parameters": {"query": "a"}} and more', "malformed tool call: "),
        ("llama3", '{"parameters": {}}', 'a tool call is a JSON object with a "name"'),
    ],
)
def test_a_malformed_call_is_invalid_with_one_line(fmt, text, error):
    parsed = parse_native(text, ACTIONS, fmt)
    assert not parsed.valid and error in parsed.error and "\n" not in parsed.error


def test_calls_n_allows_several_calls_of_one_tool():
    text = call("hermes", query="a") + "\n" + call("hermes", query="b")
    assert parse_native(text, ACTIONS, "hermes", calls=2).value == {"action": "lookup", "value": ["a", "b"]}


def test_the_arguments_may_be_a_json_string():
    text = '<tool_call>{"name": "lookup", "arguments": "{\\"query\\": \\"cat\\"}"}</tool_call>'
    assert parse_native(text, ACTIONS, "hermes").value == {"action": "lookup", "value": "cat"}


@pytest.mark.parametrize(("folder", "fmt"), [("hermes", "hermes"), ("llama3_1", "llama3")])
def test_a_rollout_calls_the_tool_with_the_native_calls_query(tmp_path: Path, folder, fmt):
    """Scripted replies in the model's format: the tool runs on the call's argument; a malformed call is
    an invalid member that calls nothing."""
    path = tool_workflow(tmp_path, folder, fmt)
    replies = [call(fmt, query="cat"), call(fmt, query="cat")[:-3]]
    (tmp_path / "replies.json").write_text(json.dumps({"solver": replies}))
    rollouts = load(path).run(limit=2, backend="scripted", models=tmp_path / "replies.json", progress=False)
    good, bad = (ep.events[0].members[0] for ep in rollouts.episodes)
    assert good.valid and good.parsed == {"action": "lookup", "value": "cat"}
    assert not bad.valid and bad.parsed is None
    found = [{"tool": "lookup", "query": "cat", "result": "a meaning"}]
    assert rollouts.episodes[0].events[0].observations == found
    assert rollouts.episodes[1].events[0].observations == []


@pytest.mark.parametrize(("folder", "fmt"), [("hermes", "hermes"), ("llama3_1", "llama3")])
def test_a_conversation_appends_the_tools_result_as_a_tool_message(tmp_path: Path, folder, fmt):
    """Turn 2 of a conversation agent is turn 1's ids, its reply as sampled, then the tool's result as the
    chat template writes a `tool` message, with the generation prompt: the whole is the template's
    rendering of [user, assistant, tool]."""
    tok = AutoTokenizer.from_pretrained(CHAT / folder)
    path = tool_workflow(tmp_path, folder, fmt)
    (tmp_path / "obs.j2").write_text("{% for h in new_history %}{{ h.result | default(h.text) }}{% endfor %}")
    text = path.read_text().replace("max_tokens = 96)", 'max_tokens = 96, observe = "obs.j2")')
    path.write_text(text.replace("call lookup on solver\n", "call lookup on solver\nact solver\n"))
    reply = call(fmt, query="cat")
    (tmp_path / "replies.json").write_text(json.dumps({"solver": [reply, "<answer>a meaning</answer>"]}))
    rollouts = load(path).run(limit=1, backend="scripted", models=tmp_path / "replies.json", progress=False)
    first, second = (e.members[0] for e in rollouts.episodes[0].events)
    assert second.prompt_token_ids[: len(first.prompt_token_ids)] == first.prompt_token_ids
    schema = json.loads(analyze(path.read_text(), str(path), [tmp_path]).program.agents["solver"].tools[0])
    decoded = tok.decode(first.prompt_token_ids)
    question = decoded[decoded.index("Define ") : decoded.index(".", decoded.index("Define ")) + 1]
    messages = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": reply},
        {"role": "tool", "content": "a meaning"},
    ]
    want = tok.apply_chat_template(messages, tools=[schema], add_generation_prompt=True, tokenize=False)
    assert tok.decode(second.prompt_token_ids) == want
    assert second.parsed == {"action": "answer", "value": "a meaning"}


def test_the_shipped_search_r1_chat_searches_with_native_calls_and_reads_tool_messages():
    """workflows/search_r1_chat.srpo on the Hermes template (scripted replies, the test retrieval server):
    turn 1 is [system, user] with the search tool's schema; the call's query reaches the server; turn 2
    appends the passages as the template's `tool` message; the answer is rewarded."""
    from srpo_dsl.backends.scripted import ScriptedBackend
    from srpo_dsl.envs.retrieval import Bm25Retriever, HttpRetriever
    from srpo_dsl.runtime.executor import Executor
    from srpo_dsl.runtime.setup import load_workflow, task_data
    from tests.support.clitools import ROOT
    from tests.support.retrieval_server import RetrievalServer

    wf = load_workflow(ROOT / "workflows/search_r1_chat.srpo")
    tok = AutoTokenizer.from_pretrained(CHAT / "hermes")
    reply = call("hermes", "search", query="pride and prejudice author")
    backend = ScriptedBackend(
        {"researcher": [reply, "<answer>Jane Austen</answer>"]}, tokenizer=CHAT / "hermes"
    )
    with RetrievalServer(Bm25Retriever(ROOT / "data/wiki_sample.jsonl")) as server:
        tools = {"search": HttpRetriever(server.url, timeout=5)}
        (ep,) = Executor(wf.graph, {"lm": backend}, wf.renderer(), tools).run(task_data(wf)[:1])
        assert server.requests[-1]["queries"] == ["pride and prejudice author"]
    first, second = (e.members[0] for e in ep.events)
    schema = json.loads(wf.graph.agents["researcher"].tools[0])
    system = wf.renderer().render("search_r1_chat/system.j2", {})
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Question: {ep.task['question']}"},
    ]
    assert tok.decode(first.prompt_token_ids) == tok.apply_chat_template(
        messages, tools=[schema], add_generation_prompt=True, tokenize=False
    )
    added = tok.decode(second.prompt_token_ids[len(first.prompt_token_ids) + len(first.response_token_ids) :])
    assert added.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\nDoc 1(Title: ")
    assert added.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert ep.answer == "Jane Austen" and ep.reward == 1.0
