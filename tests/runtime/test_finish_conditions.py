"""How a turn ended (`AGENT.finish`): in every place a condition goes, with `==` and `!=`, on each finish
reason; what the trace records; what environments, Python parsers and rewards receive; the checks.

The scripted engine ends a reply at its first stop string (`stop`), cuts one longer than `max_tokens`
(`length`, UTF-8 bytes here) and else returns it whole (`eos`)."""

import json
from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang import analyze
from srpo_dsl.lang.tooling.format import format_source
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
from srpo_dsl.runtime.traces import parse_episode, to_trace

USER = """import json
from pathlib import Path

SEEN = Path(__file__).with_name("seen.jsonl")


def _see(*what):
    with SEEN.open("a") as f:
        f.write(json.dumps(what) + "\\n")


def load(split):
    return [{"id": "q", "question": "3+4", "answer": "7"}]


def parse(text, finish):
    _see("parse", text, finish)
    return True, text


def judge(outputs, row, state):
    _see("env", [(o["text"], o["finish"]) for o in outputs["writer"]])
    return {}, True


def score(answer, row, episode):
    _see("reward", [m.finish for e in episode.events for m in e.members])
    return 1.0
"""

HEAD = """workflow finishes

policy lm = hf("m") frozen
task "user.py:load"()

agent writer uses lm prompt "p.j2" emits text with (max_tokens = 8, stop_strings = ["</x>", "</y>"])
agent closer uses lm prompt "p.j2" emits text

"""
TAIL = """
act closer
reward exact_match(closer, task.answer)
"""

# Each construct with `{op}` for its operator and `{word}` for the finish reason it tests.
CONSTRUCTS = {
    "break": """repeat at most 3 {
    act writer
    break if writer.finish {op} {word}
}""",
    "until": """repeat at most 3 {
    act writer
} until writer.finish {op} {word}""",
    "if": """act writer
if writer.finish {op} {word} {
    act writer
}""",
    "if-else": """act writer
if writer.finish {op} {word} {
    act writer
} else {
    act writer
    act writer
}""",
}

# The writer's replies, cycled: the first ends at its end of sequence, the second at a stop string (the
# text after it dropped), the third is cut at 8 bytes.
REPLIES = ["short", "ab</y>tail", "far too long a reply"]
FINISHES = ["eos", "stop", "length"]


def _writers_until(word: str, op: str, construct: str) -> int:
    """How many writer turns the construct takes with REPLIES, by hand."""
    first = FINISHES.index(word) + 1  # the turn whose finish is `word`
    if construct in ("break", "until"):
        return first if op == "==" else 1 if word != "eos" else 2
    holds = (word == "eos") == (op == "==")  # the first turn ends with `eos`
    return {"if": 1 + holds, "if-else": 2 if holds else 3}[construct]


TABLE = [(c, op, w) for c in CONSTRUCTS for op in ("==", "!=") for w in FINISHES]


def _workflow(tmp_path: Path, steps: str) -> Path:
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "p.j2").write_text("{{ task.question }}\n")
    (tmp_path / "w.srpo").write_text(HEAD + steps + "\n" + TAIL)
    return tmp_path / "w.srpo"


def _run(path: Path, script: dict):
    wf = load_workflow(path)
    executor = Executor(wf.graph, {"lm": ScriptedBackend(script)}, wf.renderer(), build_tools(wf))
    (episode,) = executor.run(task_data(wf))
    return wf, episode


@pytest.mark.parametrize(("construct", "op", "word"), TABLE, ids=[" ".join(t) for t in TABLE])
def test_a_finish_condition_means_its_operator_and_word(tmp_path: Path, construct, op, word):
    steps = CONSTRUCTS[construct].replace("{op}", op).replace("{word}", word)
    path = _workflow(tmp_path, steps)
    assert format_source(path.read_text()) == path.read_text()
    wf, episode = _run(path, {"writer": REPLIES, "closer": ["7"]})
    writers = [e for e in episode.events if e.event_type.startswith("act:writer")]
    assert len(writers) == _writers_until(word, op, construct)
    assert [e.members[0].finish for e in writers] == (FINISHES * 2)[: len(writers)]
    guards = [d["when"] for _, _, d in wf.graph.to_networkx().edges(data=True)]
    assert any(f"writer.finish {op} {word}" in g for g in guards), guards


def test_the_trace_records_each_finish_and_the_stop_string(tmp_path: Path):
    path = _workflow(tmp_path, "act writer\nact writer\nact writer")
    _wf, episode = _run(path, {"writer": REPLIES, "closer": ["7"]})
    members = [e.members[0] for e in episode.events[:3]]
    assert [(m.text, m.finish, m.stop_string) for m in members] == [
        ("short", "eos", None),
        ("ab</y>", "stop", "</y>"),
        ("far too ", "length", None),
    ]
    line = to_trace(episode, "h").model_dump_line()
    written = [e["members"][0] for e in json.loads(line)["events"][:3]]
    assert [(m["finish"], "stop_string" in m) for m in written] == [
        ("eos", False),
        ("stop", True),
        ("length", False),
    ]
    back = parse_episode(path, 1, line)
    assert [m.stop_string for m in [e.members[0] for e in back.events[:3]]] == [None, "</y>", None]


def test_a_v3_trace_reads_with_no_finish(tmp_path: Path):
    path = _workflow(tmp_path, "act writer")
    _wf, episode = _run(path, {"writer": ["short"], "closer": ["7"]})
    data = json.loads(to_trace(episode, "h").model_dump_line())
    data["schema"] = "srpo-trace/3"
    for e in data["events"]:
        for m in e["members"]:
            del m["finish"]
    back = parse_episode(path, 1, json.dumps(data))
    assert back.schema_ == "srpo-trace/3" and back.events[0].members[0].finish is None


def test_a_pool_is_cut_when_any_member_was(tmp_path: Path):
    source = HEAD.replace("agent writer uses", "agent writer[3] uses") + CONSTRUCTS["if"]
    path = _workflow(tmp_path, "")
    path.write_text(source.replace("{op}", "==").replace("{word}", "length") + "\n" + TAIL)
    _wf, episode = _run(path, {"writer": ["short", "short", "far too long a reply"], "closer": ["7"]})
    assert [len(e.members) for e in episode.events] == [3, 3, 1]  # cut: the `if` arm ran


def test_parsers_environments_and_rewards_receive_the_finish(tmp_path: Path):
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "p.j2").write_text("{{ task.question }}\n")
    (tmp_path / "w.srpo").write_text(
        """workflow w
policy lm = hf("m") frozen
task "user.py:load"()
env judge = "user.py:judge"()
agent writer uses lm prompt "p.j2" emits "user.py:parse" with (max_tokens = 20, stop_strings = "</answer>")
act writer
act writer
step judge on writer
reward "user.py:score"(writer)
"""
    )
    wf = load_workflow(tmp_path / "w.srpo")
    executor = Executor(
        wf.graph,
        {"lm": ScriptedBackend({"writer": ["<answer>7</answer>!!", "thinking very hard about it"]})},
        wf.renderer(),
    )
    executor.run(task_data(wf))
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert seen == [
        ["parse", "<answer>7</answer>", "stop"],
        ["parse", "thinking very hard a", "length"],
        ["env", [["thinking very hard a", "length"]]],
        ["reward", ["stop", "length"]],
    ]


CHECKS = [
    (
        "break if writer.end == eos",
        "E096",
        "`writer.end`: a condition reads an agent's `finish`, nothing else",
    ),
    (
        "break if writer.finish == cut",
        "E097",
        "a turn never finishes with `cut` (it ends with eos, stop, length)",
    ),
    ("break if closer.finish == eos", "E062", "unreachable: `closer` has not acted before this condition"),
]


@pytest.mark.parametrize(("cond", "code", "message"), CHECKS, ids=[c[1] for c in CHECKS])
def test_finish_conditions_are_checked_where_they_are_written(tmp_path: Path, cond, code, message):
    source = HEAD + f"repeat at most 2 {{\n    act writer\n    {cond}\n}}\n" + TAIL
    (tmp_path / "p.j2").write_text("{{ task.question }}\n")
    (tmp_path / "user.py").write_text(USER)
    found = [
        (d.code, d.span.line, d.message)
        for d in analyze(source, str(tmp_path / "w.srpo"), [tmp_path]).diagnostics
    ]
    assert (code, 11, message) in found
