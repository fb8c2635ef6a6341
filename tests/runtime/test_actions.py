"""Agents that decide their own turns: the `act(...)` contract, conditions on actions, tools that serve
the members that asked, the forced last turn, and Search-R1's agent loop against a loopback server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.envs.retrieval import Bm25Retriever, HttpRetriever
from srpo_dsl.lang.analysis import analyze
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.parsers import Parsed, parse_act, parse_output
from srpo_dsl.runtime.setup import load_workflow, task_data
from srpo_dsl.runtime.traces import read_traces, to_trace, write_traces
from srpo_dsl.runtime.usercode import UserCodeError
from tests.support.clitools import cli
from tests.support.retrieval_server import RetrievalServer
from tests.support.viewtools import page_json

ROOT = Path(__file__).resolve().parents[2]
ACTS = ("search", "answer")
THINK = "<think>hm</think>"


@pytest.mark.parametrize(
    "text,value",
    [
        (
            "<think>x</think><search> capital of Norway </search>",
            {"action": "search", "value": "capital of Norway"},
        ),
        ("<answer>Oslo</answer>", {"action": "answer", "value": "Oslo"}),
        ("<think><answer>no</answer></think> <search>q</search>", {"action": "search", "value": "q"}),
        ("<calc>1+2</calc><answer>3</answer>", {"action": "answer", "value": "3"}),  # not an action here
    ],
)
def test_an_action_is_its_one_tag(text, value):
    assert parse_act(text, ACTS) == Parsed(True, value)
    assert parse_output("act", text, args=ACTS) == Parsed(True, value)


@pytest.mark.parametrize(
    "text,error",
    [
        ("Oslo", "found none"),
        ("<search>q</search><answer>a</answer>", "found <search>, <answer>"),
        ("<answer>a</answer><answer>b</answer>", "found 2 opening"),
        ("<answer> </answer>", "empty <answer>"),
        ("<search>q", "found 1 opening and 0 closing"),
    ],
)
def test_a_broken_action_is_invalid(text, error):
    parsed = parse_act(text, ACTS)
    assert not parsed.valid and error in parsed.error


# ---- Search-R1: one agent, the HTTP retriever, the forced last turn --------------------------------


@pytest.fixture(scope="module")
def server():
    with RetrievalServer(Bm25Retriever(ROOT / "data/wiki_sample.jsonl")) as s:
        yield s


def _logged(backend: ScriptedBackend) -> tuple[ScriptedBackend, list[str]]:
    """The backend, noting every prompt it is sent, in order."""
    log: list[str] = []
    generate = backend.generate

    def noting(requests, **kw):
        log.extend(r.prompt for r in requests)
        return generate(requests, **kw)

    backend.generate = noting  # type: ignore[method-assign]
    return backend, log


def _search_r1(server, replies: list[str], rows: int = 1):
    wf = load_workflow(ROOT / "workflows/search_r1.srpo")
    backend, log = _logged(ScriptedBackend({"researcher": replies}))
    executor = Executor(
        wf.graph, {"lm": backend}, wf.renderer(), {"search": HttpRetriever(server.url, timeout=5)}
    )
    return executor.run(task_data(wf)[:rows]), log


def test_an_answer_ends_the_turns_and_is_rewarded(server):
    before = len(server.requests)
    (ep,), prompts = _search_r1(
        server,
        [f"{THINK}<search>pride and prejudice author</search>", f"{THINK}<answer>Jane Austen</answer>"],
    )
    assert [e.event_type for e in ep.events] == ["act:researcher", "act:researcher"]
    assert ep.events[0].observations and ep.events[0].observations[0]["query"] == "pride and prejudice author"
    assert len(server.requests) == before + 1 and server.requests[-1]["queries"] == [
        "pride and prejudice author"
    ]
    assert ep.answer == "Jane Austen" and ep.reward == 1.0 and ep.tool_calls == 1
    assert "<information>Doc 1(Title: " in prompts[1] and "Doc 1(" not in prompts[0]
    assert prompts[1].index("<search>pride and prejudice author</search>") < prompts[1].index(
        "<information>Doc"
    )
    assert ep.events[1].actions == ["search", "answer"]


def test_a_direct_answer_calls_no_tool(server):
    before = len(server.requests)
    (ep,), _ = _search_r1(server, [f"{THINK}<answer>Jane Austen</answer>"])
    assert len(ep.events) == 1 and ep.tool_calls == 0 and len(server.requests) == before and ep.reward == 1.0


def test_after_four_searches_one_turn_may_only_answer(server):
    searches = [f"{THINK}<search>q{i}</search>" for i in range(4)]
    (ep,), prompts = _search_r1(server, [*searches, f"{THINK}<search>more</search>"])
    assert len(ep.events) == 5 and ep.tool_calls == 4
    assert [e.actions for e in ep.events] == [["search", "answer"]] * 4 + [["answer"]]
    assert "answer now" in prompts[4] and "answer now" not in prompts[3]
    last = ep.events[4].members[0]
    assert not last.valid and ep.invalid_actions == 1  # a search where only an answer is allowed
    assert ep.answer is None and ep.reward == 0.0 and ep.events[4].observations == []
    (ep,), _ = _search_r1(server, [*searches, f"{THINK}<answer>Jane Austen</answer>"])
    assert ep.answer == "Jane Austen" and ep.reward == 1.0


def test_a_malformed_turn_is_an_invalid_action_and_the_turns_go_on(server):
    (ep,), _ = _search_r1(server, ["no tags at all", f"{THINK}<answer>Jane Austen</answer>"])
    assert [m.valid for e in ep.events for m in e.members] == [False, True]
    assert ep.tool_calls == 0 and ep.invalid_actions == 1 and ep.answer == "Jane Austen"


def test_the_trace_records_actions_and_reads_back(server, tmp_path):
    (ep,), _ = _search_r1(server, [f"{THINK}<search>q</search>", f"{THINK}<answer>Jane Austen</answer>"])
    path = tmp_path / "traces.jsonl"
    write_traces(path, [to_trace(ep, "h")])
    line = json.loads(path.read_text())
    assert line["schema"] == "srpo-trace/4" and line["events"][0]["actions"] == ["search", "answer"]
    assert line["events"][0]["members"][0]["parsed"] == {"action": "search", "value": "q"}
    (back,) = read_traces(path)
    assert back.events[1].members[0].parsed == {"action": "answer", "value": "Jane Austen"}


def test_a_version_1_trace_still_reads(tmp_path):
    (ep,) = read_traces(ROOT / "tests/data/old_run/traces.jsonl")[:1]
    assert ep.schema_ == "srpo-trace/1" and all(e.actions == [] for e in ep.events)


# ---- a pool of acting agents ---------------------------------------------------------------------

POOL = """workflow pool
policy lm = builtin("tiny")
task qa(data = "qa.jsonl")
tool search = "tools.py:search"(timeout = 5)
agent worker[3] uses lm prompt "w.j2" emits act(search, answer)
repeat at most 2 {
    act worker
    call search on worker
} until worker == answer
reward exact_match(worker, task.answers)
"""


@pytest.fixture()
def pool(tmp_path):
    (tmp_path / "pool.srpo").write_text(POOL)
    (tmp_path / "w.j2").write_text(
        "{{ task.question }}{% for h in history if h.replica == replica %}|"
        "{{ h.text if h.kind == 'output' else h.result }}{% endfor %}"
    )
    (tmp_path / "tools.py").write_text(
        "CALLS = []\ndef search(queries):\n    CALLS.append(list(queries))\n    return [q.upper() for q in queries]\n"
    )
    (tmp_path / "qa.jsonl").write_text('{"id": "q", "question": "Q", "answers": ["x"]}\n')
    return tmp_path


def _run_pool(folder: Path, replies: list[str]):
    from srpo_dsl.runtime.setup import build_tools

    wf = load_workflow(folder / "pool.srpo")
    backend, log = _logged(ScriptedBackend({"worker": replies}))
    (ep,) = Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf)).run(task_data(wf))
    return ep, log


def test_a_tool_serves_only_the_members_that_asked(pool):
    replies = ["<search>a</search>", "<answer>x</answer>", "<search>c</search>"]
    ep, prompts = _run_pool(pool, replies + ["<answer>x</answer>"] * 3)
    first = ep.events[0]
    assert [o["query"] for o in first.observations] == ["a", "c"] and ep.tool_calls == 2
    assert len(ep.events) == 2  # MIXED is not `answer`: a second round; then all answered
    assert prompts[3:] == ["Q|<search>a</search>|A", "Q|<answer>x</answer>", "Q|<search>c</search>|C"]
    assert ep.answer == "x" and ep.reward == 1.0


def test_a_pool_that_answers_together_leaves_the_loop(pool):
    ep, _ = _run_pool(pool, ["<answer>x</answer>"])
    assert len(ep.events) == 1 and ep.tool_calls == 0


def test_an_invalid_member_records_invalid_and_the_loop_goes_on(pool):
    ep, _ = _run_pool(pool, ["<answer>x</answer>", "junk", "<answer>x</answer>"])
    assert len(ep.events) == 2 and ep.invalid_actions == 2  # the round-2 `junk` too


# ---- the checks ------------------------------------------------------------------------------------


def _diags(pool: Path, *edits: tuple[str, str]) -> list[tuple[str, int, int, str, str | None]]:
    text = POOL
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    result = analyze(text, str(pool / "pool.srpo"), [pool])
    return [(d.code, d.span.line, d.span.col, d.message, d.hint) for d in result.diagnostics]


def test_the_pool_workflow_is_clean(pool):
    assert _diags(pool) == []


@pytest.mark.parametrize(
    "edits,code,line,col,message",
    [
        ([("act worker\n", "act worker only anwser\n")], "E048", 7, 21, "`worker` has no action `anwser`"),
        (
            [("act worker\n", "act worker only answer, answer\n")],
            "E048",
            7,
            29,
            "action `answer` is listed twice",
        ),
        (
            [("act(search, answer)", "tag(answer)"), ("act worker\n", "act worker only answer\n")],
            "E048",
            7,
            21,
            "`only` narrows an acting agent's actions, but `worker` emits `tag`",
        ),
        (
            [("act(search, answer)", "act(search, search)")],
            "E032",
            5,
            57,
            "`act` action `search` is listed twice",
        ),
        ([("act(search, answer)", "act")], "E031", 5, 45, "`act` lists its actions: `act(search, answer)`"),
        (
            [("until worker == answer", "until worker == done")],
            "E061",
            9,
            19,
            "`worker` never emits `done` (its actions: search, answer)",
        ),
        (
            [("tool search =", "tool lookup ="), ("call search on", "call lookup on")],
            "E063",
            8,
            10,
            "`worker` never asks for `lookup`: a tool serves the members whose action is its name, "
            "and `worker` acts with search, answer",
        ),
    ],
)
def test_acting_mistakes_are_positioned(pool, edits, code, line, col, message):
    found = [d for d in _diags(pool, *edits) if d[0] == code]
    assert found and found[0][1:3] == (line, col) and message in found[0][3], found


def test_a_condition_on_an_agent_that_neither_judges_nor_acts_says_how(pool):
    (e060,) = [d for d in _diags(pool, ("act(search, answer)", "tag(answer)")) if d[0] == "E060"]
    assert e060[3] == "conditions test a verdict or an action, but `worker` emits `tag`"
    assert "`emits act(ACTION, ..., FINAL)`, then `until worker == FINAL`" in e060[4]


def test_a_python_parser_may_declare_actions(pool):
    (pool / "p.py").write_text("def parse(text):\n    return True, {'action': 'answer', 'value': text}\n")
    assert _diags(pool, ("emits act(search, answer)", 'emits "p.py:parse"(search, answer)')) == []
    found = _diags(pool, ("emits act(search, answer)", 'emits "p.py:parse"'))
    assert [d[0] for d in found] == ["E060"]


def test_a_python_parser_of_an_acting_agent_must_return_an_action(pool):
    (pool / "p.py").write_text("def parse(text):\n    return True, text\n")
    (pool / "pool.srpo").write_text(
        POOL.replace("emits act(search, answer)", 'emits "p.py:parse"(search, answer)')
    )
    with pytest.raises(UserCodeError, match=r"p\.py:1.*acts, so a valid value is"):
        _run_pool(pool, ["anything"])
    (pool / "p2.py").write_text(
        "def parse(text):\n    kind, _, value = text.partition(':')\n    return True, {'action': kind, 'value': value}\n"
    )
    (pool / "pool.srpo").write_text(
        POOL.replace("emits act(search, answer)", 'emits "p2.py:parse"(search, answer)')
    )
    ep, _ = _run_pool(pool, ["search:a", "answer:x", "search:c", "answer:x"])
    assert [o["query"] for o in ep.events[0].observations] == ["a", "c"] and ep.reward == 1.0


def test_search_r1_compiles_to_its_shape():
    wf = load_workflow(ROOT / "workflows/search_r1.srpo")
    g = wf.graph
    assert [v.label for v in g.event_nodes] == ["act researcher", "act researcher only answer"]
    assert g.bounds.events == 5 and g.bounds.tool_calls == 4
    assert g.to_networkx().nodes["n3"]["actions"] == ["answer"]
    assert (g.train.objective, g.train.advantage) == ("srpo", "episode")  # one return per trajectory


def test_tool_calls_are_bounded_per_turn_not_per_call_step(pool):
    """Each member's turn takes one action, so it is served by one tool: after `act worker` (3 replicas),
    `call search` and `call python` serve at most 3 queries together (old bound: 3 + 3 per round).
    Hand-computed: 2 rounds x 3 members = 6 tool calls (12 counting every call step); a second
    `call search` serves the same members again (the executor re-serves), so it adds its 3 per round."""
    two_tools = POOL.replace("act(search, answer)", "act(search, python, answer)").replace(
        "    call search on worker\n", "    call search on worker\n    call python on worker\n"
    )
    (pool / "pool.srpo").write_text(
        two_tools.replace("tool search", 'tool python = "tools.py:search"()\ntool search')
    )
    bounds = load_workflow(pool / "pool.srpo").graph.bounds
    assert (bounds.events, bounds.calls, bounds.tool_calls) == (2, 6, 6)
    ep, _ = _run_pool(pool, ["<search>a</search>", "<python>b</python>", "<search>c</search>"] * 2)
    assert len(ep.events) == 2 and ep.tool_calls == 6  # the bound is reached: every member served once a turn
    again = two_tools.replace(
        "    call python on worker\n", "    call python on worker\n    call search on worker\n"
    )
    (pool / "pool.srpo").write_text(
        again.replace("tool search", 'tool python = "tools.py:search"()\ntool search')
    )
    assert load_workflow(pool / "pool.srpo").graph.bounds.tool_calls == 2 * (3 + 3)


def test_audit_and_view_show_each_members_action(pool):
    replies = ["<search>a</search>", "<answer>x</answer>", "junk", "<answer>x</answer>"]
    (pool / "replies.json").write_text(json.dumps({"worker": replies}))
    args = ("--backend", "scripted", "--model", pool / "replies.json", "--out", pool / "out")
    assert cli("run", pool / "pool.srpo", *args).returncode == 0
    audit = cli("audit", pool / "out")
    assert audit.returncode == 0, audit.stderr
    e1 = next(line for line in audit.stdout.splitlines() if line.startswith("| e1 "))
    assert "worker#1 [search]: <search>a</search>; worker#2 [answer]" in e1 and "worker#3 (invalid)" in e1
    assert e1.endswith("| 1 results | -> act:worker |")
    assert cli("view", pool / "out").returncode == 0
    (member, *_), *_ = [
        e["members"] for e in page_json((pool / "out/view.html").read_text())["episodes"][0]["events"]
    ]
    assert (member["action"], member["parsed"], member["text"][slice(*member["hl"])]) == ("search", "a", "a")


def test_a_supervisor_decides_who_acts_next_and_a_react_worker_its_own_turns():
    """workflows/supervisor.srpo (LangGraph's supervisor): decisions route to workers by action."""
    from srpo_dsl.runtime.setup import build_tools

    wf = load_workflow(ROOT / "workflows/supervisor.srpo")
    script = {
        "supervisor": [
            "<research>who wrote it</research>",
            "<compute>1813 + 2</compute>",
            "<finish>Jane Austen</finish>",
        ],
        "researcher": [
            f"{THINK}<search>pride and prejudice</search>",
            f"{THINK}<answer>Jane Austen</answer>",
        ],
        "calculator": ["<python>print(1813 + 2)</python>"],
    }
    executor = Executor(wf.graph, {"lm": ScriptedBackend(script)}, wf.renderer(), build_tools(wf))
    (ep,) = executor.run(task_data(wf)[:1])
    assert [e.event_type for e in ep.events] == [
        "act:supervisor",
        "act:researcher",
        "act:researcher",
        "act:supervisor",
        "act:calculator",
        "act:supervisor",
    ]
    assert [len(e.observations) for e in ep.events] == [0, 1, 0, 0, 1, 0]
    assert ep.events[4].observations[0]["result"].strip() == "1815"
    assert ep.answer == "Jane Austen" and ep.reward == 1.0 and ep.tool_calls == 2


def test_a_turn_stops_at_its_search_and_what_follows_is_never_seen(server):
    """Search-R1's stop strings: a reply that goes on past `</search>` (a made-up `<information>`) is cut
    right after it, recorded as finished at that stop string, and the next prompt holds the real passages."""
    made_up = "<information>Doc 1(Title: Fake) invented</information><answer>Charles Dickens</answer>"
    (ep,), prompts = _search_r1(
        server,
        [
            f"{THINK}<search>pride and prejudice author</search>{made_up}",
            f"{THINK}<answer>Jane Austen</answer>!",
        ],
    )
    first, last = ep.events[0].members[0], ep.events[1].members[0]
    assert first.text == f"{THINK}<search>pride and prejudice author</search>"
    assert (first.finish, first.stop_string, last.finish, last.stop_string) == (
        "stop",
        "</search>",
        "stop",
        "</answer>",
    )
    assert "invented" not in prompts[1] and "<information>Doc 1(Title: " in prompts[1]
    assert ep.answer == "Jane Austen" and ep.reward == 1.0
