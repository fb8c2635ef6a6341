"""Cross pairing (`KIND a, b branch N cross`, CoMLRL's cross joint mode): every form of the clause and its
checks (E105, E106), the bounds and the graph, the executor's samples (N per member, one batch) and joints
(N^agents), the returns (a sample's: the mean over its joints, hand-computed), the advantages per agent,
pruning (`keep`), scorers (with the episode), traces v4 (and v3 read), the editor, the formatter, and the
shipped `workflows/comlrl_pair.srpo` with scripted replies."""

import json
from pathlib import Path

import pytest
import torch

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang import analyze
from srpo_dsl.lang.checks.branches import MAX_JOINTS
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow
from srpo_dsl.runtime.traces import read_traces, to_trace, write_traces

ROOT = Path(__file__).resolve().parents[2]
TASK = {"id": "q", "question": "3+4", "answer": "7"}

HEAD = """workflow t
policy lm = builtin("tiny")
task arith(n = 4)
agent a uses lm prompt "p.j2" emits boxed with (max_tokens = 32)
agent b uses lm prompt "p.j2" emits boxed with (max_tokens = 32)
agent c uses lm prompt "p.j2" emits boxed with (max_tokens = 32)
"""
# The joint's reward: a's answer and b's, as CoMLRL's writers' (a table, so each pair is hand-set).
CODE = """TABLE = {("1", "x"): 1.0, ("1", "y"): 0.0, ("2", "x"): 0.5, ("2", "y"): 0.0}

def pair(answer, row, episode):
    a = next(m.parsed for e in episode.events for m in e.members if m.role == "a")
    return TABLE.get((a, answer), 0.0)

def joint(answer, row, episode):
    assert isinstance(answer, list) and [e.role for e in episode.events] == []
    return TABLE.get(tuple(answer), 0.0)

def seen(answer, row, episode):
    return float(type(episode).__name__ == "EpisodeView" and episode.answer is None)
"""
SCRIPT = {"a": ["\\boxed{1}", "\\boxed{2}"], "b": ["\\boxed{x}", "\\boxed{y}"], "c": ["\\boxed{7}"]}
REWARD = 'reward "r.py:pair"(b) invalid -0.5'


def _workflow(tmp_path: Path, steps: str, tail: str = REWARD) -> Path:
    (tmp_path / "p.j2").write_text(
        "{{ task.question }}{% for c in team_context %} {{ c.text }}{% endfor %}\n"
    )
    (tmp_path / "r.py").write_text(CODE)
    path = tmp_path / "t.srpo"
    path.write_text(HEAD + steps + "\n" + tail + "\n")
    return path


def _analyzed(tmp_path: Path, steps: str):
    path = _workflow(tmp_path, steps)
    return analyze(path.read_text(), str(path))


def _errors(tmp_path: Path, steps: str) -> list[tuple[str, int, int]]:
    found = _analyzed(tmp_path, steps).diagnostics
    return [(d.code, d.span.line, d.span.col) for d in found if d.severity == "error"]


class _Recording(ScriptedBackend):
    def __init__(self, script):
        super().__init__(script)
        self.calls: list[list[tuple[str, str]]] = []

    def generate(self, requests, *, seed=None):
        self.calls.append([(r.role, r.prompt) for r in requests])
        return super().generate(requests, seed=seed)


def _run(tmp_path: Path, steps: str, script=SCRIPT, tail: str = REWARD, samples: int = 1, **kw):
    wf = load_workflow(_workflow(tmp_path, steps, tail))
    backend = _Recording(script)
    options = wf.graph.train.model_copy(update=kw)
    executor = Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf), options)
    return executor.run([TASK], samples=samples), backend


# ---- syntax, checks, graph, bounds -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("clause", "keep", "scorer"),
    [
        ("branch 2 cross", None, None),
        ("branch 2 cross by exact_match(task.answer)", None, "exact_match"),
        ('branch 2 cross by "r.py:joint"', None, "r.py:joint"),
        ("branch 2 cross keep best by exact_match(task.answer)", "best", "exact_match"),
        ('branch 2 cross keep random by "r.py:joint"', "random", "r.py:joint"),
        ("branch 2 cross keep first by exact_match(task.answer)", "first", "exact_match"),
    ],
)
def test_every_form_of_the_cross_clause_compiles_into_the_graph(tmp_path, clause, keep, scorer):
    result = _analyzed(tmp_path, f"act a, b {clause}")
    assert [d.code for d in result.diagnostics if d.severity == "error"] == []
    g = result.program.to_networkx()
    (node,) = [attrs for _, attrs in g.nodes(data=True) if attrs.get("branch")]
    field = "answer" if scorer == "exact_match" else None
    assert node["branch"] == {
        "count": 2,
        "keep": keep,
        "scorer": scorer,
        "field": field,
        "cross": ["a", "b"],
        "joints": 4,
    }
    assert node["label"] == "act a, b K=2 branch 2 cross" + (f" keep {keep}" if keep else "")
    assert g.graph["max_paths"] == (1 if keep else 4)


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ("act a branch 2 cross\nact b", [("E105", 7, 16)]),  # at `cross`: one agent
        ("parallel a branch 3 cross keep best by exact_match(task.answer)\nact b", [("E105", 7, 21)]),
        ("act a, b branch 9 cross", [("E106", 7, 10)]),  # 81 joints > 64, at the clause
        ("act a, b, c branch 5 cross", [("E106", 7, 13)]),  # 125 joints
        ("act a, b branch 1 cross", [("E056", 7, 17)]),
        ("act a, b branch 2 cross keep best", [("E057", 7, 10)]),
        ("repeat at most 6 { act a, b branch 2 cross }", [("E058", 7, 29)]),  # 4^6 paths > 1024
    ],
)
def test_cross_errors_are_positioned(tmp_path, steps, expected):
    assert _errors(tmp_path, steps) == expected


@pytest.mark.parametrize("steps", ["act a, b cross branch 2", "act a, b branch 2 keep best cross"])
def test_cross_comes_right_after_the_count(tmp_path, steps):
    (error, *_) = _errors(tmp_path, steps)
    assert error[0] == "E001"


def test_the_bound_on_joints_allows_8_for_two_agents_and_4_for_three(tmp_path):
    assert MAX_JOINTS == 64
    assert _errors(tmp_path, "act a, b branch 8 cross") == []
    assert _errors(tmp_path, "act a, b, c branch 4 cross") == []
    message = next(d for d in _analyzed(tmp_path, "act a, b branch 9 cross").diagnostics if d.code == "E106")
    assert "81 joint combinations, more than 64" in message.message and "at most 8" in message.hint


def test_bounds_count_samples_not_joints_and_multiply_paths_by_joints(tmp_path):
    # a and b sample 2 each: 4 events, 4 calls; c then acts on each of the 4 joints' paths
    b = _analyzed(tmp_path, "act a, b branch 2 cross\nact c").program.bounds
    assert (b.events, b.calls, b.tokens, b.paths) == (8, 8, 256, 4)
    b = _analyzed(tmp_path, 'act a, b branch 3 cross keep best by "r.py:joint"\nact c').program.bounds
    assert (b.events, b.calls, b.paths) == (7, 7, 1)


# ---- the executor ------------------------------------------------------------------------------------
def test_each_agent_samples_n_times_in_one_batch_from_one_state(tmp_path):
    _, backend = _run(tmp_path, "act a, b branch 2 cross")
    (call,) = backend.calls  # N x members requests, not N^agents: one generate call
    assert [role for role, _ in call] == ["a", "b", "a", "b"]
    assert len({prompt for _, prompt in call}) == 1  # one pre-action state


def test_a_sample_returns_the_mean_of_its_joints(tmp_path):
    """docs/objective.md's table. Joints (a_i, b_j) end at once; their rewards 1, 0, 0.5, 0. a_0: mean(1, 0)
    = 0.5, a_1: mean(0.5, 0) = 0.25; b_0: mean(1, 0.5) = 0.75, b_1: 0. The episode: the mean, 0.375."""
    (ep,), _ = _run(tmp_path, "act a, b branch 2 cross")
    ids = [e.event_id.removeprefix("q/0/") for e in ep.events]
    assert ids == ["e1b0-a", "e1b1-a", "e1b0-b", "e1b1-b"]
    assert [(e.branch.agent, e.branch.index, e.branch.of, e.branch.kept) for e in ep.events] == [
        ("a", 0, 2, True),
        ("a", 1, 2, True),
        ("b", 0, 2, True),
        ("b", 1, 2, True),
    ]
    assert [e.tree_return for e in ep.events] == [0.5, 0.25, 0.75, 0.0]
    assert [e.cardinality for e in ep.events] == [1, 1, 1, 1]
    assert [m.member_index for e in ep.events for m in e.members] == [0, 0, 0, 0]
    assert [(j.samples, j.path, j.tree_return) for j in ep.joints] == [
        ({"a": 0, "b": 0}, ".0", 1.0),
        ({"a": 0, "b": 1}, ".1", 0.0),
        ({"a": 1, "b": 0}, ".2", 0.5),
        ({"a": 1, "b": 1}, ".3", 0.0),
    ]
    assert [(leaf.path, leaf.answer, leaf.reward) for leaf in ep.leaves] == [
        (".0", "x", 1.0),
        (".1", "y", 0.0),
        (".2", "x", 0.5),
        (".3", "y", 0.0),
    ]
    assert ep.team_return == 0.375 and ep.cost.calls == 4


def test_max_backup_and_later_steps_on_every_joint(tmp_path):
    """c acts on each joint's path; its returns are its leaf's. max backup: the root's V is max R_j = 1."""
    (ep,), backend = _run(tmp_path, "act a, b branch 2 cross\nact c", backup="max")
    assert [len(call) for call in backend.calls] == [4, 4]  # c once on each of the 4 paths, one batch
    c = [e for e in ep.events if e.event_type == "act:c"]
    assert [e.parent.removeprefix("q/0/") for e in c] == ["e1b0-b", "e1b1-b", "e1b0-b", "e1b1-b"]
    assert [e.tree_return for e in c] == [1.0, 0.0, 0.5, 0.0]
    assert [e.tree_return for e in ep.events[:4]] == [0.5, 0.25, 0.75, 0.0] and ep.team_return == 1.0


def test_each_agent_s_samples_are_its_own_advantage_group(tmp_path):
    """srpo, G = 1: a's returns 0.5, 0.25 (mean 0.375, std 0.125): +1, -1; b's 0.75, 0: +1, -1. As one group
    of four they would be +0.48, -0.48, +1.43, -1.43."""
    (ep,), _ = _run(tmp_path, "act a, b branch 2 cross")
    rows = build_rows([to_trace(ep, "h")], "srpo")
    assert rows.returns.tolist() == [0.5, 0.25, 0.75, 0.0] and rows.num_events == 4
    assert torch.allclose(rows.advantages, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-4)


def test_keep_best_continues_with_the_best_joint(tmp_path):
    """Scores: the joint's answers looked up in the table: 1, 0, 0.5, 0. best: (a_0, b_0) goes on, the
    others end. Returns are the scores: a_0 0.5, a_1 0.25, b_0 0.75, b_1 0; each sample's score is its
    joints' mean too."""
    steps = 'act a, b branch 2 cross keep best by "r.py:joint"'
    (ep,), _ = _run(tmp_path, steps, tail="reward exact_match(b, task.answer)")
    assert [(e.branch.kept, e.branch.score) for e in ep.events] == [
        (True, 0.5),
        (False, 0.25),
        (True, 0.75),
        (False, 0.0),
    ]
    assert [e.tree_return for e in ep.events] == [0.5, 0.25, 0.75, 0.0]
    assert [(j.path, j.kept, j.score, j.tree_return) for j in ep.joints] == [
        ("", True, 1.0, 1.0),
        (None, False, 0.0, 0.0),
        (None, False, 0.5, 0.5),
        (None, False, 0.0, 0.0),
    ]
    assert ep.answer == "x" and ep.leaves == []


def test_keep_first_skips_joints_with_an_invalid_member_and_the_penalty_is_shared(tmp_path):
    """a_0 is invalid: joints (a_0, *) carry its -0.5; the first valid joint is (a_1, b_0). Returns: a_0
    mean(-0.5, -0.5) = -0.5, a_1 mean(0.5, 0) = 0.25, b_0 mean(-0.5, 0.5) = 0, b_1 mean(-0.5, 0) = -0.25."""
    script = {"a": ["oops", "\\boxed{2}"], "b": ["\\boxed{x}", "\\boxed{y}"]}
    steps = 'act a, b branch 2 cross keep first by "r.py:joint"'
    (ep,), _ = _run(tmp_path, steps, script, tail="reward exact_match(b, task.answer) invalid -0.5")
    assert [e.branch.kept for e in ep.events] == [False, True, True, False]
    assert [e.tree_return for e in ep.events] == [-0.5, 0.25, 0.0, -0.25]
    assert ep.invalid_actions == 1


def test_a_python_scorer_of_a_joint_gets_its_answers_and_the_episode(tmp_path):
    steps = 'act a, b branch 2 cross by "r.py:seen"'
    (ep,), _ = _run(tmp_path, steps)
    assert [j.score for j in ep.joints] == [1.0] * 4  # each call: an EpisodeView, before the episode ended


def test_evaluation_samples_a_cross_step_once(tmp_path):
    wf = load_workflow(_workflow(tmp_path, "act a, b branch 2 cross"))
    backend = _Recording(SCRIPT)
    (ep,) = Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf)).run([TASK], branching=False)
    assert [len(c) for c in backend.calls] == [2] and [e.event_id for e in ep.events] == ["q/0/e1"]
    assert ep.joints == [] and ep.events[0].branch is None


# ---- traces ------------------------------------------------------------------------------------------
def test_traces_record_the_joints_and_read_back(tmp_path):
    (ep,), _ = _run(tmp_path, "act a, b branch 2 cross")
    write_traces(tmp_path / "t.jsonl", [to_trace(ep, "h")])
    data = json.loads((tmp_path / "t.jsonl").read_text())
    assert data["joints"][2] == {
        "group": "q/0/e1",
        "samples": {"a": 1, "b": 0},
        "path": ".2",
        "kept": True,
        "score": None,
        "tree_return": 0.5,
    }
    assert data["events"][1]["branch"]["agent"] == "a"
    (back,) = read_traces(tmp_path / "t.jsonl")
    assert back.joints == ep.joints and back.events[3].branch.agent == "b"
    assert build_rows([back], "srpo").returns.tolist() == [0.5, 0.25, 0.75, 0.0]


def test_a_version_3_trace_reads_without_joints_or_agents(tmp_path):
    steps = "act a, b branch 2"  # a plain branch: no `agent` in its marks, no `joints`
    (ep,), _ = _run(tmp_path, steps)
    line = to_trace(ep, "h").model_dump_line()
    assert '"joints"' not in line and '"agent"' not in line
    data = json.loads(line)
    data["schema"] = "srpo-trace/3"
    (tmp_path / "v3.jsonl").write_text(json.dumps(data) + "\n")
    (back,) = read_traces(tmp_path / "v3.jsonl")
    assert back.joints == [] and {e.branch.agent for e in back.events} == {None}


# ---- the editor and the formatter --------------------------------------------------------------------
def test_completion_offers_cross_after_the_count(tmp_path):
    from srpo_dsl.lsp.completion import completions

    def labels(text: str) -> set[str]:
        return {item.label for item in completions(text, 0, len(text))}

    assert {"cross", "keep", "by"} <= labels("act a, b branch 2 ")
    after = labels("act a, b branch 2 cross ")
    assert {"keep", "by"} <= after and "cross" not in after
    assert "cross" not in labels("act a, b branch 2 keep best ")


@pytest.mark.parametrize(
    "messy",
    [
        "act  a ,b   branch 2   cross\n",
        "act a,b branch  3 cross keep  best by exact_match( task.answer )\n",
        'act a, b branch 2 cross  by "r.py:joint"\n',
    ],
)
def test_fmt_round_trips_the_cross_clause(messy):
    from srpo_dsl.lang.tooling.format import format_source

    tidy = format_source(HEAD + messy)
    assert format_source(tidy) == tidy
    step = tidy.splitlines()[-1]
    assert step.startswith("act a, b branch ") and " cross" in step and "  " not in step


# ---- the shipped workflow ----------------------------------------------------------------------------
def test_comlrl_pair_rewards_every_joint_of_the_two_halves():
    """head samples sun, sunf, an untagged half (invalid), moon; tail flower, lower, flower, x. A joint
    that spells "sunflower" (9 letters) earns 1, else half the share of letters right from the start:
    sun+lower 3 of 9, sunf+flower 4 of 9, moon+flower none; the invalid head's joints earn -0.1 (its
    penalty). head's first half takes part in flower, lower, flower, x: (1 + 1/6 + 1 + 1/6) / 4."""
    wf = load_workflow(ROOT / "workflows/comlrl_pair.srpo")
    word = {"id": "sunflower", "word": "sunflower"}
    script = {
        "head": ["<half>sun</half>", "<half>sunf</half>", "sun", "<half>moon</half>"],
        "tail": ["<half>flower</half>", "<half>lower</half>", "<half>flower</half>", "<half>x</half>"],
    }
    backend = _Recording(script)
    (ep,) = Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf)).run([word])
    assert [len(c) for c in backend.calls] == [8]  # 4 samples of each agent's half, one call
    assert len(ep.joints) == 16 and len(ep.leaves) == 16 and len(ep.events) == 8
    rewards = {tuple(j.samples.values()): j.tree_return for j in ep.joints}
    assert rewards[(0, 0)] == 1.0 and rewards[(1, 1)] == 1.0 and rewards[(0, 2)] == 1.0
    assert rewards[(0, 1)] == pytest.approx(0.5 * 3 / 9) and rewards[(1, 0)] == pytest.approx(0.5 * 4 / 9)
    assert [rewards[(2, j)] for j in range(4)] == pytest.approx([-0.1] * 4)
    assert rewards[(3, 0)] == 0.0
    head = [e.tree_return for e in ep.events if e.branch.agent == "head"]
    assert head[0] == pytest.approx((1.0 + 1 / 6 + 1.0 + 1 / 6) / 4)
    assert head[2] == pytest.approx(-0.1)
    assert ep.team_return == pytest.approx(sum(rewards.values()) / 16)


def test_the_viewer_names_each_sample_s_agent(tmp_path):
    from srpo_dsl.view.episodes import episode_json

    (ep,), _ = _run(tmp_path, "act a, b branch 2 cross")
    events = episode_json(None, to_trace(ep, "h"))["events"]
    assert [e["alt"] for e in events] == [
        "a's 1 of 2, kept",
        "a's 2 of 2, kept",
        "b's 1 of 2, kept",
        "b's 2 of 2, kept",
    ]
