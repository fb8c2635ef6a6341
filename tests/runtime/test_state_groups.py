"""State keys and `advantage = state` (GiGPO's anchor states): an environment returns a key last, every
event made after that step carries it (and the trace records it), and the estimator adds to the episode's
advantage a step advantage over the events of one prompt that acted from the same key. The numbers are
those of docs/objective.md ("Groups by state: GiGPO"), from the shipped workflows/gigpo_grid.srpo."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang import analyze
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.rl.objective.advantages import (
    AdvantageInputs,
    get_advantage_estimator,
    per_episode,
    per_event,
    state_advantages,
)
from srpo_dsl.rl.objective.plugins import training_objective
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime.episode import EnvProgress, EnvStepResult, Episode
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import load_workflow, task_data
from srpo_dsl.runtime.traces import parse_episode, read_traces
from srpo_dsl.runtime.usercode import UserCodeError
from tests.support.clitools import ROOT, cli

WORKFLOW = ROOT / "workflows/gigpo_grid.srpo"

# Task `top` (start 1,1, goal 1,3), G = 3. The replies are served in request order: each round, the
# walkers of the episodes still running, episode 0 first.
MOVES = ["right", "down", "up", "right", "right", "right", "up", "down", "right", "left"]
KEYS = [["1,1", "1,2"], ["1,1", "2,1", "2,2", "1,2"], ["1,1", "1,1", "1,2", "2,2"]]
RETURNS = [0.9, 0.7, -0.4]  # 1 at the goal, -0.1 for every other move

# docs/objective.md's table, in closed form. Episodes: mean 0.4, deviations 0.5, 0.3, -0.8, population
# std sqrt(0.98 / 3) = 0.7 sqrt(2/3). Key 1,1 (four events: 0.9, 0.7, -0.4, -0.4): mean 0.2, std
# sqrt(0.365); key 1,2: the three episodes' returns again; key 2,2: 0.7 and -0.4, +-1; key 2,1: alone, 0.
E = 0.7 * (2 / 3) ** 0.5
S11 = 0.365**0.5
EPISODE = [0.5 / E, 0.3 / E, -0.8 / E]
STEP = [[0.7 / S11, 0.5 / E], [0.5 / S11, 0.0, 1.0, 0.3 / E], [-0.6 / S11, -0.6 / S11, -0.8 / E, -1.0]]
TABLE = [EPISODE[i] + s for i, steps in enumerate(STEP) for s in steps]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grid")
    script = folder / "replies.json"
    script.write_text(json.dumps({"walker": [f"<move>{m}</move>" for m in MOVES]}))
    out = folder / "out"
    r = cli(
        "run", WORKFLOW, "--backend", "scripted", "--model", script, "--limit", "1", "-G", "3", "--out", out
    )
    assert r.returncode == 0, r.stderr
    return read_traces(out / "traces.jsonl")


def test_the_workflow_is_clean():
    r = cli("validate", WORKFLOW)
    assert r.returncode == 0 and "0 error(s), 0 warning(s)" in r.stdout + r.stderr, r.stdout + r.stderr


def test_each_event_carries_the_key_of_the_cell_it_moved_from(traces):
    assert [[e.state_key for e in ep.events] for ep in traces] == KEYS
    torch.testing.assert_close(torch.tensor([ep.reward for ep in traces]), torch.tensor(RETURNS))
    assert [ep.envs["grid"].done for ep in traces] == [True, True, False]
    # a blocked move: another observation, the same cell, so the same key
    blocked = traces[2].events[0].observations[0]["result"]
    assert blocked.startswith("`up` leaves the grid\nYou are at row 1, column 1.")
    assert traces[2].events[1].state_key == traces[2].events[0].state_key == "1,1"


def test_the_trace_writes_the_key_and_reads_it_back(traces, tmp_path):
    line = traces[0].model_dump_line()
    assert [e["state_key"] for e in json.loads(line)["events"]] == ["1,1", "1,2"]
    assert parse_episode(tmp_path / "t.jsonl", 1, line) == traces[0]
    unkeyed = traces[0].model_copy(
        update={"events": [e.model_copy(update={"state_key": None}) for e in traces[0].events]}
    )
    assert all("state_key" not in e for e in json.loads(unkeyed.model_dump_line())["events"])


def test_older_traces_read_without_a_key(traces, tmp_path):
    for schema in ("srpo-trace/1", "srpo-trace/3"):
        data = json.loads(traces[1].model_dump_line()) | {"schema": schema}
        for event in data["events"]:
            del event["state_key"]
        old = parse_episode(tmp_path / "old.jsonl", 1, json.dumps(data))
        assert [e.state_key for e in old.events] == [None] * 4
    shipped = read_traces(ROOT / "tests/data/old_run/traces.jsonl")  # written by an older srpo-dsl
    assert shipped and all(e.state_key is None for ep in shipped for e in ep.events)


def state_objective():
    return training_objective(TrainOptions(advantage="state"), ROOT)


def test_the_advantages_are_the_tables(traces):
    rows = build_rows(traces, state_objective())
    torch.testing.assert_close(rows.advantages, torch.tensor(TABLE), atol=1e-5, rtol=0)
    assert rows.advantages[3].item() == pytest.approx(EPISODE[1], abs=1e-6)  # 2,1: a group of one
    # the table's last column: under `event` the ten events are one group (mean 0.3, std sqrt(0.332))
    event = [0.6] * 2 + [0.4] * 4 + [-0.7] * 4
    expected = torch.tensor(event) / 0.332**0.5
    torch.testing.assert_close(build_rows(traces, "srpo").advantages, expected, atol=1e-5, rtol=0)


def inputs_of(traces, keys=True) -> AdvantageInputs:
    rows = build_rows(traces, "srpo")
    events = [e for ep in traces for e in ep.events for _ in e.members]
    return AdvantageInputs(
        rows.returns,
        rows.event_ids,
        rows.prompt_ids,
        rows.event_types,
        rows.roles,
        rows.episode_ids,
        torch.tensor([RETURNS[int(i)] for i in rows.episode_ids]),
        state_keys=[e.state_key for e in events] if keys else None,
    )


def test_the_weight_scales_the_step_advantage_only(traces):
    inputs = inputs_of(traces)
    episode = per_episode(inputs)
    torch.testing.assert_close(episode, torch.tensor([EPISODE[i] for i, s in enumerate(STEP) for _ in s]))
    half = state_advantages(inputs, weight=0.5)
    expected = [EPISODE[i] + 0.5 * s for i, steps in enumerate(STEP) for s in steps]
    torch.testing.assert_close(half, torch.tensor(expected), atol=1e-5, rtol=0)
    assert get_advantage_estimator("state")(inputs, 1e-6).tolist() == state_advantages(inputs).tolist()


def test_events_without_a_key_fall_back_to_their_prompt_and_event_type(traces):
    unkeyed = inputs_of(traces, keys=False)
    torch.testing.assert_close(
        get_advantage_estimator("state")(unkeyed, 1e-6), per_episode(unkeyed) + per_event(unkeyed)
    )
    # keyless events group apart from keyed ones: here the first event of each episode loses its key
    keys = [None if k == "1,1" and i in (0, 2, 6) else k for i, k in enumerate(inputs_of(traces).state_keys)]
    partly = AdvantageInputs(**{**inputs_of(traces).__dict__, "state_keys": keys})
    got = state_advantages(partly) - per_episode(partly)
    # the three keyless events hold the three episodes' returns: the episodes' deviations again
    assert got[[0, 2, 6]].tolist() == pytest.approx(EPISODE, abs=1e-5)
    assert got[7].item() == 0.0  # episode 2's second event is now alone at 1,1


def test_state_keys_need_one_entry_per_row(traces):
    with pytest.raises(ValueError, match="state_keys needs one entry per row"):
        AdvantageInputs(**{**inputs_of(traces).__dict__, "state_keys": ["1,1"]})
    with pytest.raises(ValueError, match="the `state` estimator needs each row's episode_ids"):
        state_advantages(AdvantageInputs(**{**inputs_of(traces).__dict__, "episode_ids": None}))


def test_traj_refuses_the_state_estimator():
    with pytest.raises(ValueError, match="objective `traj` gives each episode one advantage"):
        training_objective(TrainOptions(objective="traj", advantage="state"), ROOT)


def test_several_environments_key_the_state_together():
    ep = Episode("e", "p", 0, {})
    assert ep.state_key() is None
    ep.envs["maze"] = EnvProgress(log=[EnvStepResult("running", 0.0, key="2,3")])
    assert ep.state_key() == "2,3"
    ep.envs["door"] = EnvProgress(log=[EnvStepResult("running", 0.0, key="open")])
    assert ep.state_key() == "door=open maze=2,3"
    ep.envs["maze"].log.append(EnvStepResult("running", 0.0))  # its next step returned no key
    assert ep.state_key() == "open"


# ---- the user's Python -----------------------------------------------------------------------------


def grid_copy(tmp_path: Path, last: str) -> Path:
    """The shipped workflow in `tmp_path`, its environment returning `last` as the key."""
    shutil.copytree(ROOT / "workflows/gigpo_grid", tmp_path / "gigpo_grid")
    code = (ROOT / "workflows/gigpo_grid.py").read_text()
    (tmp_path / "gigpo_grid.py").write_text(code.replace('f"{at[0]},{at[1]}"', last))
    path = tmp_path / "gigpo_grid.srpo"
    path.write_text(WORKFLOW.read_text())
    return path


@pytest.mark.parametrize(
    ("last", "shown"), [("at", "(1, 1)"), ("1", "1"), ("[at]", "[(1, 1)]"), ("b'1,1'", "b'1,1'")]
)
def test_a_key_of_the_wrong_type_is_one_line_at_the_def(tmp_path, last, shown):
    path = grid_copy(tmp_path, last)
    wf = load_workflow(path)
    with pytest.raises(UserCodeError) as err:
        Executor(wf.graph, {"lm": ScriptedBackend({"walker": ["<move>up</move>"]})}, wf.renderer()).run(
            task_data(wf, limit=1)
        )
    line = (
        path.with_suffix(".py")
        .read_text()
        .splitlines()
        .index("def walk(outputs: dict, row: dict, state: dict, step_cost: float = 0.1):")
    )
    assert str(err.value) == (
        f"{tmp_path / 'gigpo_grid.py'}:{line + 1}: walk() returned the state key {shown} on task 'top', "
        "step 1: a state key is a str (or None), e.g. the position as text, f'{row},{col}'"
    )


def test_a_none_key_is_no_key(tmp_path):
    wf = load_workflow(grid_copy(tmp_path, "None"))
    (ep,) = Executor(
        wf.graph, {"lm": ScriptedBackend({"walker": ["<move>right</move>"]})}, wf.renderer()
    ).run(task_data(wf, limit=1))
    assert [e.state_key for e in ep.events] == [None, None] and ep.envs["grid"].done


SELECTING = """workflow w
policy lm = hf("m")
task "env.py:load"()
env board = "env.py:{fn}"() emits route(p)
agent p[2] uses lm prompt "p.j2" emits text
step board
repeat at most 2 {{
    parallel p by board
    step board on p
}} until board == done
reward board
train with (advantage = state)
"""

ENV = """
def load(split):
    return [{"question": "q"}]

def keyed(outputs, row, state):
    state["n"] = state.get("n", 0) + 1
    return {"p": "go"}, state["n"] > 2, 0.0, {"p": [1, 2][: state["n"]]}, f"round {state['n']}"

def unkeyed(outputs, row, state):
    return {}, True, 0.0, {"p": [1]}

def returned(outputs, row, state):
    value = ({}, True, 0.0, {"p": [1]})
    return value
"""


def selecting(tmp_path: Path, fn: str) -> Path:
    (tmp_path / "env.py").write_text(ENV)
    (tmp_path / "p.j2").write_text("P {{ observation }}")
    path = tmp_path / "w.srpo"
    path.write_text(SELECTING.format(fn=fn))
    return path


def test_an_environment_that_selects_returns_its_key_fifth(tmp_path):
    wf = load_workflow(selecting(tmp_path, "keyed"))
    (ep,) = Executor(wf.graph, {"lm": ScriptedBackend({"p": ["x"]})}, wf.renderer()).run(task_data(wf))
    assert [(e.state_key, len(e.members)) for e in ep.events] == [("round 1", 1), ("round 2", 2)]


def warnings(path: Path, old: str = "", new: str = "") -> list[tuple[str, int, int, str]]:
    result = analyze(path.read_text().replace(old, new), str(path), [path.parent])
    return [(d.code, d.span.line, d.span.col, d.message) for d in result.diagnostics]


W008 = (
    "`advantage = state` groups steps by the state key an environment returns, but {}: every step falls "
    "back to its (prompt, event type) group"
)


def test_the_checker_warns_when_no_environment_returns_a_key(tmp_path):
    path = selecting(tmp_path, "unkeyed")
    assert warnings(path) == [("W008", 12, 13, W008.format("no environment of this workflow returns one"))]
    assert warnings(path, "unkeyed", "keyed") == []
    assert warnings(path, "unkeyed", "returned") == []  # a variable: it may hold a key
    assert warnings(path, "advantage = state", "advantage = event") == []
    grid = grid_copy(tmp_path / "grid", "None")
    assert [w[0] for w in warnings(grid)] == ["W008"]  # a key written as None is none


def test_the_checker_warns_when_there_is_no_environment(tmp_path):
    (tmp_path / "a.j2").write_text("{{ task.question }}")
    path = tmp_path / "w.srpo"
    path.write_text(
        'workflow w\npolicy lm = hf("m")\ntask arith(n = 2)\nagent a uses lm prompt "a.j2" emits text\n'
        "act a\nreward exact_match(a, task.answer)\ntrain with (group = 2, advantage = state)\n"
    )
    assert warnings(path) == [("W008", 7, 24, W008.format("it has no environment"))]


# ---- a real step ------------------------------------------------------------------------------------


ANY_TEXT = """

def walk_any(outputs, row, state, step_cost=0.1):
    \"\"\"`walk`, a text's length choosing its move (a random model's replies are no `<move>` tags).\"\"\"
    picked = [{**o, "valid": True, "value": list(MOVES)[len(o["text"]) % 4]} for o in outputs.get("walker", [])]
    return walk({"walker": picked} if outputs else {}, row, state, step_cost)
"""


@pytest.mark.slow
def test_a_training_step_trains_on_the_state_advantages(tmp_path, tiny_random_model):
    """`srpo-dsl train` of the shipped workflow on a tiny random model (CPU), one step, its replies' lengths
    choosing the moves: the advantages the update recorded on each event are the `state` estimator's of
    the step's traces, and differ from `event`'s."""
    path = grid_copy(tmp_path, 'f"{at[0]},{at[1]}"')
    path.with_suffix(".py").write_text(path.with_suffix(".py").read_text() + ANY_TEXT)
    text = path.read_text().replace("gigpo_grid.py:walk", "gigpo_grid.py:walk_any")
    path.write_text(text.replace("emits tag(move)", "emits text"))
    task = {"id": "next", "start": [2, 2], "goal": [2, 3], "question": "From the centre one cell right."}
    (tmp_path / "gigpo_grid/tasks.jsonl").write_text(json.dumps(task) + "\n")  # random moves reach it
    out = tmp_path / "run"
    options = ["eval_size=1", "eval_k=1", "save_every=1", "report_to=none"]
    r = cli(
        "train", path, "--model", tiny_random_model, "--device", "cpu", "--steps", "1", "-G", "4",
        "--batch", "1", *[x for o in options for x in ("--option", o)], "--out", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    episodes = read_traces(next(out.rglob("traces.jsonl")))
    keys = [e.state_key for ep in episodes for e in ep.events]
    assert len(set(keys)) > 1 and all(k is not None and k.count(",") == 1 for k in keys)
    trained = [a for ep in episodes for e in ep.events if e.update for a in e.update.advantages]
    expected = build_rows(episodes, state_objective()).advantages
    torch.testing.assert_close(torch.tensor(trained), expected, atol=1e-6, rtol=0)
    assert not torch.allclose(expected, build_rows(episodes, "srpo").advantages)
