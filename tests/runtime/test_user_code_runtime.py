"""User code at run time: imported once, time-limited, its failures one line naming the user's file:line."""

import json
import textwrap
from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime import usercode
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
from srpo_dsl.runtime.usercode import UserCodeError
from tests.support.clitools import cli
from tests.support.user_code import BASE_CODE, SCRIPT, make


def execute(path: Path, script: dict, samples: int = 1):
    wf = load_workflow(path)
    tools = build_tools(wf)
    executor = Executor(wf.graph, {"lm": ScriptedBackend(script)}, wf.renderer(), tools)
    return executor.run(task_data(wf), samples=samples), tools


def test_a_workflow_on_user_code_runs(tmp_path):
    episodes, tools = execute(make(tmp_path), SCRIPT)
    assert [ep.task["id"] for ep in episodes] == ["train-0", "train-1", "train-2"]
    first = episodes[0]
    members = first.events[0].members
    assert [(m.valid, m.parsed) for m in members] == [(True, "1"), (False, None)]
    assert first.events[0].observations == [{"tool": "calc", "query": "1", "result": "1!"}]
    assert first.observations == first.events[0].observations and first.tool_calls == 1
    assert first.answer == "1" and first.reward == 0.0 and first.team_return == -0.5  # gold "0", one invalid
    assert [(ep.answer, ep.reward) for ep in episodes] == [("1", 0.0), ("0", 0.0), ("2", 1.0)]
    assert tools["calc"].fn.fn.__globals__["CALLS"] == [4]  # one call for the whole round


def test_failing_parser_outputs_are_invalid_actions_with_the_parsers_reason(tmp_path):
    path = make(tmp_path, 'def strict(text):\n    return False, "no number in it"\n')
    path.write_text(path.read_text().replace('"user.py:parse"', '"user.py:strict"'))
    episodes, _ = execute(path, SCRIPT)
    assert all(not m.valid and m.parsed is None for m in episodes[0].events[0].members)
    assert episodes[0].invalid_actions == 2 and episodes[0].tool_calls == 0


def test_an_exception_names_the_users_file_line_function_and_input(tmp_path):
    code = """
    def helper(x):
        return 1 / x

    def broken(answer, row):
        return helper(0)
    """
    path = make(tmp_path, code, reward="broken")
    with pytest.raises(UserCodeError) as err:
        execute(path, SCRIPT)
    line = (BASE_CODE + textwrap.dedent(code)).splitlines().index("    return 1 / x") + 1
    assert str(err.value) == (
        f"{tmp_path / 'user.py'}:{line}: broken() raised on answer '1', task 'train-0': "
        "ZeroDivisionError: division by zero"
    )


@pytest.mark.parametrize(
    "value,reason",
    [
        ("None", "returned None on answer '1', task 'train-0': a reward is a finite number"),
        ("float('nan')", "returned nan on"),
        ("float('inf')", "returned inf on"),
        ("'1.0'", "returned '1.0' on"),
        (
            "{'b': 1.0, 'z': 0.0}",
            "returned scores for ['z'] on answer '1', task 'train-0': the roles are a, b",
        ),
        ("{'a': 1.0}", "returned no score for the rewarded agent `b`"),
        ("{'b': None}", "returned {'b': None} on"),
    ],
)
def test_a_reward_that_returns_no_number_is_an_error(tmp_path, value, reason):
    path = make(tmp_path, f"def odd(answer, row):\n    return {value}\n", reward="odd")
    with pytest.raises(UserCodeError, match="odd\\(\\) " + reason.replace("(", "\\(").replace("[", "\\[")):
        execute(path, SCRIPT)


def test_a_hanging_reward_is_stopped_where_it_hangs(tmp_path, monkeypatch):
    monkeypatch.setitem(usercode.TIME_LIMITS, "reward", 0.3)
    code = "def slow(answer, row):\n    while True:\n        time.sleep(0.01)\n"
    path = make(tmp_path, code, reward="slow")
    with pytest.raises(UserCodeError) as err:
        execute(path, SCRIPT)
    line = (BASE_CODE + code).splitlines().index("        time.sleep(0.01)") + 1
    assert str(err.value).startswith(f"{tmp_path / 'user.py'}:{line}: slow() did not return within 0.3 s")


def test_a_module_that_fails_to_import_is_one_error(tmp_path):
    path = make(tmp_path, "raise RuntimeError('no GPU here')\n")
    with pytest.raises(UserCodeError) as err:
        execute(path, SCRIPT)
    line = len(BASE_CODE.splitlines()) + 1
    assert str(err.value) == f"{tmp_path / 'user.py'}:{line}: importing it failed: RuntimeError: no GPU here"


def test_modules_are_imported_once_per_process(tmp_path):
    log = tmp_path / "imports.log"
    path = make(tmp_path, f"with open({str(log)!r}, 'a') as f:\n    f.write('imported\\n')\n")
    execute(path, SCRIPT)
    execute(path, SCRIPT)
    assert log.read_text() == "imported\n"


def test_per_role_returns_reach_the_training_rows(tmp_path):
    code = "def roles(answer, row):\n    return {'b': float(answer == row['gold']), 'a': 0.25}\n"
    episodes, _ = execute(make(tmp_path, code, reward="roles"), SCRIPT, samples=2)
    wrong, right = episodes[:2]  # task train-0 (gold "0"): b answers "1", then "0"
    assert (wrong.reward, wrong.team_return, wrong.keyed_returns) == (0.0, -0.5, {"b": -0.5, "a": -0.25})
    assert (right.reward, right.team_return, right.keyed_returns) == (1.0, 1.0, {"b": 1.0, "a": 0.25})
    rows = build_rows(episodes, "srpo")
    first = sorted(
        (r, float(x)) for p, r, x in zip(rows.prompt_ids, rows.roles, rows.returns) if p == "train-0"
    )
    assert first == [("a", -0.25), ("a", -0.25), ("a", 0.25), ("a", 0.25), ("b", -0.5), ("b", 1.0)]


def test_a_three_argument_reward_reads_the_episode(tmp_path):
    code = """
    def shaped(answer, row, episode):
        roles = [e.role for e in episode.events]
        errors = sum("error" in o for e in episode.events for o in e.observations)
        return len(roles) + 10 * episode.cost.calls + 100 * errors + (roles == ["a", "b"])
    """
    episodes, _ = execute(make(tmp_path, code, reward="shaped"), SCRIPT)
    assert episodes[0].reward == 2 + 10 * 3 + 0 + 1


TOOLS = """
def exploding(queries):
    raise ValueError("calculator broke")

def short(queries):
    return ["one"]

def typed(queries):
    return [1 for q in queries]

def hangs(queries):
    while True:
        time.sleep(0.01)
"""


@pytest.mark.parametrize(
    "tool,error",
    [
        ("exploding", "exploding() raised on 4 queries, the first '1': ValueError: calculator broke"),
        ("short", "short() returned 1 observations for 4 queries"),
        ("typed", "1 is not a str"),
        ("hangs", "hangs() did not return within 0.2 s on 4 queries"),
    ],
)
def test_a_failing_tool_is_an_observation_and_counted_never_a_crash(tmp_path, tool, error):
    path = make(tmp_path, TOOLS)
    path.write_text(path.read_text().replace('"user.py:calc"(timeout = 5', f'"user.py:{tool}"(timeout = 0.2'))
    episodes, _ = execute(path, SCRIPT)
    first = episodes[0]
    assert first.tool_errors == first.tool_calls == 1
    assert first.observations[0]["query"] == "1" and error in first.observations[0]["error"]
    assert all(ep.done for ep in episodes)


def test_tool_batches_and_options(tmp_path):
    path = make(tmp_path, tool_options=", batch = 3, suffix = '?'".replace("'", '"'))
    episodes, tools = execute(path, SCRIPT, samples=2)
    assert tools["calc"].fn.fn.__globals__["CALLS"] == [3, 3, 2]  # 8 valid queries, 3 per call
    assert episodes[0].observations[0]["result"] == "1?"


def test_loader_rows_and_splits(tmp_path):
    wf = load_workflow(make(tmp_path))
    assert [r["id"] for r in task_data(wf, split="eval")] == ["eval-0", "eval-1", "eval-2"]
    assert task_data(wf, limit=2)[1] == {"question": "train 1", "gold": "1", "id": "train-1"}


@pytest.mark.parametrize(
    "body,message",
    [
        (
            "return {'a': 1}",
            "load() returned {'a': 1} for split 'train': a loader returns a list of dict rows",
        ),
        ("return []", "load() returned no rows for split 'train'"),
        ("return [1, 2]", "load() row 0 of split 'train' is 1: every row is a dict"),
    ],
)
def test_a_loader_that_returns_no_rows_is_an_error(tmp_path, body, message):
    path = make(tmp_path, f"def load(split, n=3):\n    {body}\n")
    with pytest.raises(
        UserCodeError, match=message.replace("(", "\\(").replace(")", "\\)").replace("[", "\\[")
    ):
        task_data(load_workflow(path))


def test_the_cli_reports_user_errors_in_one_line_and_writes_nothing(tmp_path):
    path = make(tmp_path, "def broken(answer, row):\n    raise KeyError('gold')\n", reward="broken")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(SCRIPT))
    out = tmp_path / "out"
    r = cli("run", path, "--backend", "scripted", "--model", script, "--out", out)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert (
        last.startswith(f"error: {tmp_path / 'user.py'}:")
        and "broken() raised" in last
        and "KeyError" in last
    )
    assert "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.partial-*"))


TRAIN_CODE = """
def additions(split, n=4):
    return [{"question": f"{i}+{i}", "sum": 2 * i} for i in range(n)]

def graded(answer, row, episode):
    solved = answer is not None and answer.strip() == str(row["sum"])
    valid = sum(m.valid for e in episode.events if e.role == "solver" for m in e.members)
    return {"aggregator": float(solved), "solver": 0.1 * valid}
"""

TRAIN_WORKFLOW = """workflow user_train
policy lm = hf("tiny")
task "user.py:additions"(n = 4)
agent solver[2] uses lm prompt "s.j2" emits boxed with (max_tokens = 6)
agent aggregator uses lm prompt "a.j2" emits text with (max_tokens = 4)
parallel solver
aggregate aggregator
reward "user.py:graded"(aggregator) invalid -0.1
train with (group = 2, batch = 2, steps = 2, eval_size = 2, eval_k = 2, save_every = 2, lr = 1e-3)
"""


@pytest.mark.slow
def test_train_uses_user_code_and_per_role_returns(tmp_path, tiny_random_model):
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import train
    from srpo_dsl.runtime.traces import read_traces

    (tmp_path / "user.py").write_text(TRAIN_CODE)
    (tmp_path / "s.j2").write_text("S {{ task.question }}=")
    (tmp_path / "a.j2").write_text("A {{ task.question }}=")
    (tmp_path / "w.srpo").write_text(TRAIN_WORKFLOW)
    out = tmp_path / "run"
    history = train(
        plan_file(tmp_path / "w.srpo", out, models={"lm": str(tiny_random_model)}, device="cpu"),
        progress=False,
    )
    assert [row["step"] for row in history] == [1, 2] and all(row["num_events"] > 0 for row in history)
    episodes = read_traces(out / "traces.jsonl")
    assert len(episodes) == 4 and {ep.prompt_id for ep in episodes} <= {f"train-{i}" for i in range(4)}
    for ep in episodes:
        valid = sum(m.valid for e in ep.events if e.members[0].role == "solver" for m in e.members)
        penalty = -0.1 * ep.invalid_actions
        assert ep.role_rewards == pytest.approx(
            {"aggregator": ep.score + penalty, "solver": 0.1 * valid + penalty}
        )


@pytest.mark.slow
def test_a_fresh_run_that_fails_in_user_code_leaves_nothing(tmp_path, tiny_random_model):
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import train

    (tmp_path / "user.py").write_text(TRAIN_CODE + "\ndef broken(answer, row):\n    return row['missing']\n")
    (tmp_path / "s.j2").write_text("S {{ task.question }}=")
    (tmp_path / "a.j2").write_text("A {{ task.question }}=")
    (tmp_path / "w.srpo").write_text(TRAIN_WORKFLOW.replace('"user.py:graded"', '"user.py:broken"'))
    out = tmp_path / "run"
    with pytest.raises(
        UserCodeError, match=r"user.py:\d+: broken\(\) raised on answer .*: KeyError: 'missing'"
    ):
        train(
            plan_file(tmp_path / "w.srpo", out, models={"lm": str(tiny_random_model)}, device="cpu"),
            progress=False,
        )
    assert not out.exists()
