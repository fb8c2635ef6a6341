"""A Python branch scorer (`branch N keep best by "f.py:fn"`) is called as a reward is: `(answer, row)`,
or `(answer, row, episode)` with the episode a Python reward reads (the path so far, with each
environment's state); `validate` refuses any other signature (E094) at the reference."""

import json
from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.runtime.episode import EpisodeView
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow
from srpo_dsl.runtime.usercode import UserCodeError
from tests.support.clitools import cli

TASK = {"id": "q", "question": "3+4", "answer": "7"}
SCRIPT = {"planner": ["\\boxed{7}"], "solver": ["\\boxed{12}", "\\boxed{7}"]}

CODE = """import json
from pathlib import Path

def _note(*args):
    with open(Path(__file__).with_name("seen.jsonl"), "a") as f:
        f.write(json.dumps(args) + "\\n")

def board(outputs, row, state):
    state["target"] = outputs["planner"][-1]["value"]
    return {}, False

def two(answer, row):
    _note(answer, row["id"])
    return float(len(answer))

def three(answer, row, episode):
    box = episode.envs["box"].state
    _note(answer, row["id"], [e.role for e in episode.events], box, episode.task["id"], episode.answer)
    return float(answer == episode.envs["box"].state["target"])

def named(answer, row, episode=None):
    _note(answer, type(episode).__name__)
    return float(answer == "7")

def one(answer):
    return 0.0

def four(answer, row, episode, extra):
    return 0.0
"""

WORKFLOW = """workflow t
policy lm = builtin("tiny")
task arith(n = 4)
env box = "s.py:board"(timeout = 5)
agent planner uses lm prompt "p.j2" emits boxed
agent solver uses lm prompt "p.j2" emits boxed
revise planner
step box on planner
aggregate solver branch 2 {rule}by "s.py:{scorer}"
reward exact_match(solver, task.answer)
"""


def _workflow(tmp_path: Path, scorer: str, rule: str = "keep best ") -> Path:
    (tmp_path / "s.py").write_text(CODE)
    (tmp_path / "p.j2").write_text("{{ task.question }}\n")
    path = tmp_path / "t.srpo"
    path.write_text(WORKFLOW.format(scorer=scorer, rule=rule))
    return path


def _run(tmp_path: Path, scorer: str, rule: str = "keep best "):
    wf = load_workflow(_workflow(tmp_path, scorer, rule))
    executor = Executor(wf.graph, {"lm": ScriptedBackend(SCRIPT)}, wf.renderer(), build_tools(wf))
    (ep,) = executor.run([TASK])
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    return ep, seen


def test_a_two_parameter_scorer_gets_the_answer_and_the_row(tmp_path):
    ep, seen = _run(tmp_path, "two")
    assert seen == [["12", "q"], ["7", "q"]]
    assert [e.branch.score for e in ep.events[1:]] == [2.0, 1.0] and ep.answer == "12"


def test_a_three_parameter_scorer_reads_the_episode_and_the_environments_state(tmp_path):
    ep, seen = _run(tmp_path, "three")
    path_so_far = [["planner"], {"target": "7"}, "q", None]  # the alternatives share it: each is its answer
    assert seen == [["12", "q", *path_so_far], ["7", "q", *path_so_far]]
    assert [e.branch.score for e in ep.events[1:]] == [0.0, 1.0]
    assert [e.branch.kept for e in ep.events[1:]] == [False, True] and ep.answer == "7"


def test_a_tree_branch_scorer_reads_the_episode_too(tmp_path):
    ep, seen = _run(tmp_path, "three", rule="")
    assert [s[:3] for s in seen] == [["12", "q", ["planner"]], ["7", "q", ["planner"]]]
    assert [e.branch.score for e in ep.events if e.branch] == [0.0, 1.0]


def test_a_third_parameter_named_episode_gets_it_even_with_a_default(tmp_path):
    _, seen = _run(tmp_path, "named")
    assert seen == [["12", EpisodeView.__name__], ["7", EpisodeView.__name__]]


@pytest.mark.parametrize(
    "scorer,why",
    [
        ("one", "it takes 1 positional argument(s), srpo-dsl passes 2"),
        ("four", "its parameter(s) `extra` would get no value"),
    ],
)
def test_validate_refuses_a_scorer_it_cannot_call_at_the_reference(tmp_path, scorer, why):
    path = _workflow(tmp_path, scorer)
    r = cli("validate", path)
    assert r.returncode == 1
    first, source, caret = r.stdout.splitlines()[:3]
    line = next(i for i, text in enumerate(CODE.splitlines(), 1) if text.startswith(f"def {scorer}("))
    assert first == (
        f"{path}:9:40: error[E094]: `{scorer}` ({tmp_path / 's.py'}:{line}) cannot be called as "
        f"scorer(answer, row[, episode]) -> float: {why}"
    )
    assert source.endswith(f'aggregate solver branch 2 keep best by "s.py:{scorer}"')
    assert caret.index("^") == source.index('"s.py:') and caret.count("^") == len(f'"s.py:{scorer}"')


@pytest.mark.parametrize("returned", ['{"solver": 1.0}', 'float("nan")', '"high"'])
def test_a_scorer_that_returns_no_number_is_an_error_at_its_def(tmp_path, returned):
    """A scorer's return is checked as a scorer's (a reward's `{role: number}` is no score), at the user's line."""
    code = f"def board(outputs, row, state):\n    return {{}}, False\n\ndef odd(answer, row):\n    return {returned}\n"
    path = _workflow(tmp_path, "odd")
    (tmp_path / "s.py").write_text(code)
    wf = load_workflow(path)
    executor = Executor(wf.graph, {"lm": ScriptedBackend(SCRIPT)}, wf.renderer(), build_tools(wf))
    with pytest.raises(UserCodeError, match="a branch scorer returns a finite number") as failed:
        executor.run([TASK])
    assert f"{tmp_path / 's.py'}:4" in str(failed.value)
