"""What a Python parser's valid value may be: any JSON data for an agent that does not act (a dict without
`"action"` too: a plain value, not an action choice); an acting agent's is `{"action": A, "value": ...}`,
anything else an error naming the parser's file and line. Outputs the parser rejects are invalid actions."""

import json
from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import load_workflow, task_data
from srpo_dsl.runtime.traces import read_traces, to_trace, write_traces
from srpo_dsl.runtime.usercode import UserCodeError

CODE = """import json
from pathlib import Path

def parse(text):
    if not text.isdigit():
        return False, "no number"
    return True, {"answer": int(text)}

def act_parse(text):
    kind, _, value = text.partition(":")
    return True, {"action": kind, "value": value}

def score(answer, row):
    with open(Path(__file__).with_name("seen.jsonl"), "a") as f:
        f.write(json.dumps(answer) + "\\n")
    return float(isinstance(answer, dict) and answer.get("answer") == 3)
"""

WORKFLOW = """workflow w
policy lm = builtin("tiny")
task qa(data = "qa.jsonl")
agent solver uses lm prompt "p.j2" emits "p.py:{parser}"{actions}
act solver
reward "p.py:score"(solver) invalid -0.5
"""


def _run(tmp_path: Path, replies: list[str], parser: str = "parse", actions: str = ""):
    (tmp_path / "p.py").write_text(CODE)
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "qa.jsonl").write_text('{"id": "q", "question": "Q", "answers": ["3"]}\n')
    (tmp_path / "w.srpo").write_text(WORKFLOW.format(parser=parser, actions=actions))
    wf = load_workflow(tmp_path / "w.srpo")
    executor = Executor(wf.graph, {"lm": ScriptedBackend({"solver": replies})}, wf.renderer(), {})
    episodes = executor.run(task_data(wf), samples=len(replies))
    write_traces(tmp_path / "t.jsonl", [to_trace(ep, "h") for ep in episodes])
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    return read_traces(tmp_path / "t.jsonl"), seen


def test_a_dict_without_action_is_a_plain_valid_value_of_an_agent_that_does_not_act(tmp_path):
    traces, seen = _run(tmp_path, ["3", "junk"])
    (good,), (bad,) = traces[0].events[0].members, traces[1].events[0].members
    assert (good.valid, good.parsed) == (True, {"answer": 3})
    assert traces[0].invalid_actions == 0 and traces[0].answer == {"answer": 3}
    assert (traces[0].score, traces[0].reward) == (1.0, 1.0)
    assert (bad.valid, bad.parsed) == (False, None)  # what the parser rejects is still an invalid action
    assert traces[1].invalid_actions == 1 and traces[1].answer is None
    assert (traces[1].score, traces[1].reward) == (0.0, -0.5)
    assert seen == [{"answer": 3}, None]  # what the reward was given


def test_an_acting_agents_parser_returning_no_action_is_an_error_at_its_def(tmp_path):
    with pytest.raises(UserCodeError) as err:
        _run(tmp_path, ["3"], actions="(think, answer)")
    assert (err.value.file, err.value.line) == (str(tmp_path / "p.py"), 4)
    assert '`solver` acts, so a valid value is {"action": A, "value": ...}' in err.value.message


def test_an_acting_agents_parser_takes_an_action_or_the_output_is_invalid(tmp_path):
    traces, seen = _run(tmp_path, ["answer:3", "think:hm"], "act_parse", "(think, answer)")
    assert [(m.valid, m.parsed) for t in traces for m in t.events[0].members] == [
        (True, {"action": "answer", "value": "3"}),
        (True, {"action": "think", "value": "hm"}),
    ]
    assert [t.answer for t in traces] == ["3", None] and seen == ["3", None]
    (tmp_path / "w.srpo").write_text(
        WORKFLOW.format(parser="act_parse", actions="(think, answer)").replace(
            "act solver", "act solver only answer"
        )
    )
    wf = load_workflow(tmp_path / "w.srpo")
    executor = Executor(wf.graph, {"lm": ScriptedBackend({"solver": ["think:hm"]})}, wf.renderer(), {})
    (ep,) = executor.run(task_data(wf))
    assert not ep.events[0].members[0].valid and ep.invalid_actions == 1 and ep.team_return == -0.5
