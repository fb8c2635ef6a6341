"""Environment steps: `env NAME = "file.py:function"(...)`, `step NAME on A, B`, conditions on `done`,
`reward NAME`; checked with `ast`, run with the scripted backend, failures one line naming file:line."""

import json
import textwrap
from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang import analyze
from srpo_dsl.lang.compile.graph_formats import to_dot, to_mermaid
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
from srpo_dsl.runtime.traces import EnvSummary, read_traces, to_trace, write_traces
from srpo_dsl.runtime.usercode import UserCodeError
from tests.support.clitools import ROOT, cli

USER = """
def load(split, n=2):
    return [{"question": f"q{i}"} for i in range(n)]

def count(outputs, row, state, done_at=2, gain=0.5):
    state["n"] = state.get("n", 0) + 1
    row["question"] = "changed by the env"  # a copy: later prompts still see the task's own
    texts = [o["text"] for o in outputs["a"]]
    return {"a": f"step {state['n']} saw {texts}", "b": f"b{state['n']}"}, state["n"] >= done_at, gain
"""

WORKFLOW = """workflow w
policy lm = hf("m")
task "user.py:load"(n = 2)
env box = "user.py:{fn}"(timeout = {timeout}, done_at = 2)
agent a uses lm prompt "a.j2" emits text
agent b uses lm prompt "b.j2" emits tag(ok)
repeat at most 4 {{
    parallel a
    step box on a
    parallel b
}} until box == done
reward box invalid -0.5
"""


def make(
    tmp_path: Path, code: str = "", fn: str = "count", timeout: float = 5, workflow: str = WORKFLOW
) -> Path:
    (tmp_path / "user.py").write_text(USER + textwrap.dedent(code))
    (tmp_path / "a.j2").write_text(
        "A {{ task.question }} obs={{ observation }} n={{ observations | length }}"
    )
    (tmp_path / "b.j2").write_text("B obs={{ observation }}")
    path = tmp_path / "w.srpo"
    path.write_text(workflow.format(fn=fn, timeout=timeout))
    return path


def execute(path: Path, script: dict, samples: int = 1, limit: int | None = None):
    wf = load_workflow(path)
    backends = {name: ScriptedBackend(script) for name in wf.graph.policies}
    return Executor(wf.graph, backends, wf.renderer(), build_tools(wf)).run(
        task_data(wf, limit=limit), samples=samples
    )


def prompt(event) -> str:
    """What the member of an event was shown (the scripted backend's tokens are the prompt's bytes)."""
    return bytes(event.members[0].prompt_token_ids).decode()


SCRIPT = {"a": ["x"], "b": ["<ok>y</ok>"]}


# ---- the checks ----------------------------------------------------------------------------------


def diagnostics(
    tmp_path: Path, old: str = "", new: str = "", code: str = ""
) -> list[tuple[str, int, int, str]]:
    path = make(tmp_path, code)
    text = path.read_text().replace(old, new)
    result = analyze(text, str(path), [tmp_path])
    return [(d.code, d.span.line, d.span.col, d.message) for d in result.diagnostics]


def test_the_base_workflow_is_clean(tmp_path):
    assert diagnostics(tmp_path) == []


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ("step box on a", "step bx on a", ("E014", 9, 10, "undefined environment `bx`")),
        ("step box on a", "step box on a, c", ("E012", 9, 20, "undefined agent `c`")),
        (
            "repeat at most 4 {",
            "step box on b\nrepeat at most 4 {",  # inside the loop, b acted in the round before
            ("E062", 7, 13, "unreachable: `b` has no outputs before this step of `box`"),
        ),
        (
            "until box == done",
            "until box == passed",
            ("E061", 11, 16, "`box` is an environment: a condition tests `done`, not `passed`"),
        ),
        (
            "repeat at most 4 {",
            "if box == done { parallel a }\nrepeat at most 4 {",
            ("E062", 7, 4, "unreachable: `box` has not stepped before this condition"),
        ),
        (
            "reward box",
            "reward a",
            ("E028", 12, 8, "`reward a` names an environment, but `a` is an agent"),
        ),
        (
            "reward box",
            "reward exact_match",
            (
                "E028",
                12,
                8,
                "`reward exact_match` names an environment, but `exact_match` is a reward function: "
                "it scores an agent",
            ),
        ),
        (
            "reward box",
            "reward bx",
            ("E028", 12, 8, "`reward bx` names an environment, but `bx` is not a declared environment"),
        ),
        ("agent b uses", "agent box uses", ("E010", 6, 7, "`box` is already defined (line 4)")),
        (
            'env box = "user.py:count"',
            "env box = grid",
            ("E090", 4, 11, "an environment is the user's Python, not `grid`"),
        ),
        (
            "done_at = 2",
            "done_at = 2, limit = 3",
            (
                "E094",
                4,
                11,
                "`count` ({path}:5) cannot be called as env(outputs, row, state, **options) -> "
                "(observations, done[, reward[, key]]): it has no parameter `limit` (and no **kwargs)",
            ),
        ),
        (
            '"user.py:count"',
            '"user.py:two"',
            (
                "E094",
                4,
                11,
                "`two` ({path}:10) cannot be called as env(outputs, row, state, **options) -> "
                "(observations, done[, reward[, key]]): it takes 2 positional argument(s), srpo-dsl passes 3",
            ),
        ),
        (
            '"user.py:count"',
            '"user.py:cuont"',
            ("E093", 4, 11, "{path} defines no top-level function `cuont`"),
        ),
        ("timeout = 5", "timeout = 0", ("E024", 4, 27, "Python env: `timeout` must be greater than 0")),
    ],
)
def test_each_mistake_is_one_positioned_error(tmp_path, old, new, expected):
    found = diagnostics(tmp_path, old, new, "def two(outputs, row):\n    return {}, True\n")
    code, line, col, message = expected
    assert (code, line, col, message.format(path=tmp_path / "user.py")) in found, found


def test_an_environment_never_stepped_is_a_warning_and_never_rewarded_an_error(tmp_path):
    unused = diagnostics(tmp_path, "reward box", 'env spare = "user.py:count"()\nreward box')
    assert unused == [("W001", 12, 5, "`spare` is declared but never used")]
    never = diagnostics(tmp_path, "step box on a\n", "").copy()
    assert ("E071", 11, 8, "the rewarded environment `box` never steps") in never


def test_a_trainable_step_after_the_environments_last_step_never_reaches_its_reward(tmp_path):
    found = diagnostics(tmp_path, "} until box == done\n", "} until box == done\nparallel b\n")
    assert found == [
        (
            "E070",
            12,
            1,
            "`b` acts after the last reward point: its trainable actions never reach the reward of `box`",
        )
    ]


def test_a_condition_at_the_top_of_a_loop_body_reads_the_previous_round(tmp_path):
    body = "repeat at most 4 {\n    break if box == done\n    parallel a"
    assert diagnostics(tmp_path, "repeat at most 4 {\n    parallel a", body) == []


# ---- the graph ------------------------------------------------------------------------------------


def test_the_graph_has_an_env_node_its_declaration_and_its_reward(tmp_path):
    path = make(tmp_path)
    graph = analyze(path.read_text(), str(path), [tmp_path]).graph
    (env,) = [d for _, d in graph.nodes(data=True) if d["kind"] == "env"]
    assert env == {
        "kind": "env",
        "span": f"{path}:9:5",
        "line": 9,
        "col": 5,
        "loop": "L1",
        "label": "step box on a",
        "env": "box",
        "on": ["a"],
    }
    assert graph.graph["envs"] == {
        "box": {
            "kind": "python",
            "ref": "user.py:count",
            "options": {"timeout": 5.0, "done_at": 2},
            "words": [],
            "selects": [],
        }
    }
    assert graph.graph["reward"] == {"fn": "box", "agent": None, "field": None, "penalty": -0.5, "env": "box"}
    (code,) = [c for c in graph.graph["code"] if c["use"] == "env"]
    assert code["function"] == "count" and code["line"] == 5
    guards = {d["when"] for _, _, d in graph.edges(data=True)}
    assert {"box != done and loop < 4", "box == done or loop >= 4"} <= guards
    assert graph.graph["max_events"] == 8 and graph.graph["max_tool_calls"] == 0  # a step is not an event
    assert '    n2[\\"step box on a"/]' in to_mermaid(graph).splitlines()
    assert '    "n2" [label="step box on a", shape=invtrapezium];' in to_dot(graph).splitlines()


# ---- running -------------------------------------------------------------------------------------


def test_observations_reach_the_addressed_prompts_and_done_ends_the_loop(tmp_path):
    (ep,) = execute(make(tmp_path), SCRIPT, limit=1)
    assert [e.event_type for e in ep.events] == ["parallel:a", "parallel:b"] * 2  # done after 2 of 4 rounds
    assert [prompt(e) for e in ep.events] == [
        "A q0 obs=None n=0",
        "B obs=b1",
        "A q0 obs=step 1 saw ['x'] n=2",  # the row the env changed was a copy
        "B obs=b2",
    ]
    a1, b1, a2, b2 = ep.events
    assert a1.observations == [{"env": "box", "agent": "a", "result": "step 1 saw ['x']"}]
    assert b1.observations == [{"env": "box", "agent": "b", "result": "b2"}]  # b had not acted at step 1
    assert a2.observations == [{"env": "box", "agent": "a", "result": "step 2 saw ['x']"}]
    assert b2.observations == []
    assert [o["result"] for o in ep.observations] == ["step 1 saw ['x']", "b1", "step 2 saw ['x']", "b2"]
    assert ep.state["box"] == "done" and ep.tool_calls == 0


def test_state_persists_within_an_episode_and_starts_empty_in_each(tmp_path):
    episodes = execute(make(tmp_path), SCRIPT, samples=2)
    assert len(episodes) == 4
    for ep in episodes:
        seen = [o["result"] for o in ep.observations if o["agent"] == "a"]
        assert seen == ["step 1 saw ['x']", "step 2 saw ['x']"]
        assert ep.envs["box"].state == {"n": 2} and ep.envs["box"].steps == 2 and ep.envs["box"].done


def test_the_score_is_the_sum_of_the_environments_rewards_with_the_penalty(tmp_path):
    (ep,) = execute(make(tmp_path), {"a": ["x"], "b": ["<ok>y</ok>", "no tag"]}, limit=1)
    assert ep.invalid_actions == 1
    assert ep.envs["box"].reward == 1.0 and ep.reward == 1.0  # 0.5 at each of the two steps
    assert ep.team_return == 1.0 - 0.5 and ep.answer is None


def test_an_environment_that_never_says_done_runs_every_round(tmp_path):
    path = make(tmp_path)
    path.write_text(path.read_text().replace("done_at = 2", "done_at = 9, gain = 0.25"))
    (ep,) = execute(path, SCRIPT, limit=1)
    assert len(ep.events) == 8 and ep.state["box"] == "running"
    assert ep.envs["box"].steps == 4 and not ep.envs["box"].done and ep.reward == 1.0


def test_the_trace_records_each_environments_summary_and_reads_back(tmp_path):
    (ep,) = execute(make(tmp_path), SCRIPT, limit=1)
    out = tmp_path / "traces.jsonl"
    write_traces(out, [to_trace(ep, "h")])
    assert json.loads(out.read_text())["envs"] == {"box": {"steps": 2, "done": True, "reward": 1.0}}
    (back,) = read_traces(out)
    assert back.envs == {"box": EnvSummary(steps=2, done=True, reward=1.0)}
    assert [e.observations for e in back.events] == [e.observations for e in ep.events]
    line = json.loads(out.read_text())
    del line["envs"]  # a trace written before environments, or of a workflow without one
    out.write_text(json.dumps(line) + "\n")
    (old,) = read_traces(out)
    assert old.envs == {} and "envs" not in json.loads(old.model_dump_line())


def test_audit_and_view_read_a_run_with_environments(tmp_path):
    path = make(tmp_path)
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(SCRIPT))
    out = tmp_path / "out"
    assert (
        cli("run", path, "--backend", "scripted", "--model", script, "--out", out, "--limit", "1").returncode
        == 0
    )
    audit = cli("audit", out)
    assert audit.returncode == 0, audit.stderr
    assert "env box: 2 steps, done True, reward +1.000" in audit.stdout and "| 1 results |" in audit.stdout
    view = cli("view", out)
    assert view.returncode == 0 and (out / "view.html").is_file(), view.stderr


# ---- failures ------------------------------------------------------------------------------------


def test_an_exception_is_one_line_naming_the_users_file_and_line(tmp_path):
    code = """
    def broken(outputs, row, state, done_at=2):
        return row["missing"]
    """
    with pytest.raises(UserCodeError) as err:
        execute(make(tmp_path, code, fn="broken"), SCRIPT)
    line = (USER + textwrap.dedent(code)).splitlines().index('    return row["missing"]') + 1
    assert str(err.value) == (
        f"{tmp_path / 'user.py'}:{line}: broken() raised on task 'train-0', step 1: KeyError: 'missing'"
    )


def test_a_time_out_names_the_line_it_was_running(tmp_path):
    code = """
    def slow(outputs, row, state, done_at=2):
        while True:
            pass
    """
    with pytest.raises(
        UserCodeError, match=r"user.py:\d+: slow\(\) did not return within 0.2 s on task 'train-0'"
    ):
        execute(make(tmp_path, code, fn="slow", timeout=0.2), SCRIPT)


@pytest.mark.parametrize(
    "value,reason",
    [
        (
            "None",
            "returned None on task 'train-0', step 1: an environment returns (observations, done), "
            "(observations, done, reward) or (observations, done, reward, key)",
        ),
        ("({}, True, 1, 'k', 2)", "returned ({}, True, 1, 'k', 2) on"),
        ("({}, True, 1, 2)", "returned the state key 2 on task 'train-0', step 1: a state key is a str"),
        ("([], True)", "returned the observations [] on task 'train-0', step 1: a dict {agent: str}"),
        (
            "({'c': 'x'}, True)",
            "returned observations for ['c'] on task 'train-0', step 1: the agents are a, b",
        ),
        (
            "({'a': 3}, True)",
            "returned the observations {'a': 3} on task 'train-0', step 1: an observation is a str",
        ),
        ("({}, 1)", "returned done = 1 on task 'train-0', step 1: `done` is a bool"),
        (
            "({}, True, float('nan'))",
            "returned the reward nan on task 'train-0', step 1: a reward is a finite",
        ),
        ("({}, True, '1')", "returned the reward '1' on"),
        ("({}, True, True)", "returned the reward True on"),
    ],
)
def test_a_wrong_return_is_one_line_at_the_def(tmp_path, value, reason):
    code = f"def wrong(outputs, row, state, done_at=2):\n    return {value}\n"
    with pytest.raises(UserCodeError) as err:
        execute(make(tmp_path, code, fn="wrong"), SCRIPT)
    line = (USER + code).splitlines().index("def wrong(outputs, row, state, done_at=2):") + 1
    assert str(err.value).startswith(f"{tmp_path / 'user.py'}:{line}: wrong() {reason}")


def test_the_cli_stops_with_one_line_and_writes_nothing(tmp_path):
    code = "def broken(outputs, row, state, done_at=2):\n    raise ValueError('no sandbox')\n"
    path = make(tmp_path, code, fn="broken")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(SCRIPT))
    out = tmp_path / "out"
    r = cli("run", path, "--backend", "scripted", "--model", script, "--out", out)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {tmp_path / 'user.py'}:") and last.endswith(
        "broken() raised on task 'train-0', step 1: ValueError: no sandbox"
    )
    assert not out.exists() and not list(tmp_path.glob(".out.partial-*"))


# ---- the shipped workflows -----------------------------------------------------------------------


def test_code_env_feeds_the_failures_back_to_both_and_rewards_the_hidden_tests(tmp_path):
    """PettingLLMs' code environment: turn 1 passes 1 of 3 hidden tests and fails one of the tester's two;
    turn 2 passes 2 of 3 hidden tests and all of the tester's: done, score 2/3."""
    script = tmp_path / "replies.json"
    coder = [
        "<code>def add(a, b):\n    return 3</code>",
        "<code>def add(a, b):\n    return abs(a) + b</code>",
    ]
    script.write_text(
        json.dumps(
            {"coder": coder, "tester": ["<tests>assert add(1, 2) == 3\nassert add(0, 0) == 0</tests>"]}
        )
    )
    out = tmp_path / "out"
    r = cli(
        "run",
        ROOT / "workflows/code_env.srpo",
        "--backend",
        "scripted",
        "--model",
        script,
        "--limit",
        "1",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stderr
    (ep,) = read_traces(out / "traces.jsonl")
    assert [e.event_type for e in ep.events] == ["act:coder", "act:tester"] * 2  # 2 of 5 turns
    feedback = "turn 1: 1 of 2 tests fail:\nfailed: assert add(0, 0) == 0"
    for event in ep.events[2:]:
        assert feedback in bytes(event.members[0].prompt_token_ids).decode()
    assert [o.get("result") for o in ep.events[0].observations] == [feedback]
    assert ep.events[2].observations == [{"env": "sandbox", "agent": "coder", "result": "all 2 tests pass"}]
    assert ep.envs["sandbox"].steps == 2 and ep.envs["sandbox"].done
    assert ep.reward == pytest.approx(2 / 3) and ep.team_return == pytest.approx(2 / 3) and ep.answer is None


def test_plan_path_walks_to_the_goal_or_runs_out_of_moves():
    path = ROOT / "workflows/plan_path.srpo"
    moves = ["<move>up</move>", "<move>up</move>", "<move>right</move>", "<move>right</move>"]
    wf = load_workflow(path)
    rows = [r for r in task_data(wf) if r["id"] == "open"]  # from the bottom left to the top right
    (ep,) = Executor(wf.graph, {"lm": ScriptedBackend({"walker": moves})}, wf.renderer()).run(rows)
    assert len(ep.events) == 4 and ep.reward == 1.0 and ep.envs["grid"].done
    assert ep.events[-1].observations[0]["result"] == "you reached the goal"
    assert "A.G" in bytes(ep.events[2].members[0].prompt_token_ids).decode()  # after up, up: one row A.G
    (stuck,) = Executor(
        wf.graph, {"lm": ScriptedBackend({"walker": ["<move>left</move>"]})}, wf.renderer()
    ).run(rows)
    assert len(stuck.events) == 8 and stuck.reward == 0.0 and not stuck.envs["grid"].done
    assert stuck.events[0].observations[0]["result"].startswith("`left` is blocked\n..G\n...\nA..")


def test_code_env_samples_as_pettingllms_trains():
    """PettingLLMs trains its code team at top_k = 20, temperature 1: both agents inherit it from the policy."""
    agents = load_workflow(ROOT / "workflows/code_env.srpo").graph.agents
    assert {a: (agents[a].top_k, agents[a].temperature) for a in ("coder", "tester")} == {
        "coder": (20, 1.0),
        "tester": (20, 1.0),
    }
