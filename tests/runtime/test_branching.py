"""Branching rollouts: the syntax and its checks, the bounds that multiply, the executor's alternatives
(one batch, one prompt), trees and pruned branches with scripted replies, the backed-up returns and the
sibling-grouped advantages (hand-computed), traces v3, and evaluation that does not branch."""

import json
from pathlib import Path

import pytest
import torch

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang import analyze
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow
from srpo_dsl.runtime.traces import read_traces, to_trace, write_traces

ROOT = Path(__file__).resolve().parents[2]
TASK = {"id": "q", "question": "3+4", "answer": "7"}

HEAD = """workflow t
policy lm = builtin("tiny")
task arith(n = 4)
agent planner uses lm prompt "p.j2" emits boxed with (max_tokens = 32)
agent solver uses lm prompt "p.j2" emits boxed with (max_tokens = 32)
agent judge uses lm prompt "p.j2" emits verdict(yes, no)
"""


def _workflow(tmp_path: Path, steps: str, tail: str = "reward exact_match(solver, task.answer) invalid -0.5"):
    (tmp_path / "p.j2").write_text(
        "{{ task.question }}{% for c in team_context %} {{ c.text }}{% endfor %}\n"
    )
    (tmp_path / "score.py").write_text("def length(answer, row):\n    return float(len(str(answer)))\n")
    path = tmp_path / "t.srpo"
    path.write_text(HEAD + steps + "\n" + tail + "\n")
    return path


def _errors(tmp_path: Path, steps: str) -> list[tuple[str, int, int]]:
    path = _workflow(tmp_path, steps)
    result = analyze(path.read_text(), str(path))
    return [(d.code, d.span.line, d.span.col) for d in result.diagnostics if d.severity == "error"]


class _Recording(ScriptedBackend):
    """The scripted backend, remembering each generate call's prompts."""

    def __init__(self, script):
        super().__init__(script)
        self.calls: list[list[str]] = []

    def generate(self, requests, *, seed=None):
        self.calls.append([r.prompt for r in requests])
        return super().generate(requests, seed=seed)


def _run(path: Path, script: dict, samples: int = 1, **kw):
    wf = load_workflow(path)
    backend = _Recording(script)
    options = wf.graph.train.model_copy(update=kw)
    executor = Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf), options)
    return executor, backend, wf


# ---- syntax, checks, bounds -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ("aggregate solver branch 1", [("E056", 7, 25)]),  # at the count
        ("aggregate solver branch 2 keep bset by exact_match(task.answer)", [("E057", 7, 32)]),
        ("aggregate solver branch 2 keep best", [("E057", 7, 18)]),  # a pruned alternative needs a score
        ("aggregate solver branch 2 by exact_mach(task.answer)", [("E028", 7, 30)]),
        ("aggregate solver branch 2 by exact_match(answer)", [("E029", 7, 30)]),
        ('aggregate solver branch 2 by "nope.py:f"', [("E091", 7, 30)]),
        ("repeat at most 11 { aggregate solver branch 2 }", [("E058", 7, 38)]),  # 2^11 > 1024 paths
    ],
)
def test_branch_errors_are_positioned(tmp_path, steps, expected):
    assert _errors(tmp_path, steps) == expected


def test_a_branch_without_its_count_is_a_syntax_error_at_the_missing_number(tmp_path):
    errors = _errors(tmp_path, "aggregate solver branch keep best")
    assert errors and errors[0][0] == "E001" and errors[0][1:] == (7, 25)


def _bounds(tmp_path, steps):
    path = _workflow(tmp_path, steps)
    return analyze(path.read_text(), str(path)).program.bounds


def test_tree_branches_multiply_what_follows_and_pruned_ones_do_not(tmp_path):
    # planner: 2 alternatives (2 events, 2 calls, 64 tokens); the solver then runs on each of 2 paths
    b = _bounds(tmp_path, "revise planner branch 2\naggregate solver")
    assert (b.events, b.calls, b.tokens, b.paths) == (4, 4, 128, 2)
    # a loop of 3 rounds: round i runs on 2^(i-1) paths, each sampling 2 alternatives: 2 + 4 + 8
    b = _bounds(tmp_path, "repeat at most 3 { aggregate solver branch 2 }")
    assert (b.events, b.paths) == (14, 8)
    # pruned: 3 alternatives per round, one path throughout
    b = _bounds(
        tmp_path, "repeat at most 3 { aggregate solver branch 3 keep best by exact_match(task.answer) }"
    )
    assert (b.events, b.calls, b.paths) == (9, 9, 1)
    # the dearer arm of an `if` (with its paths) bounds it
    b = _bounds(
        tmp_path, "verify judge\nif judge == yes { aggregate solver branch 4 } else { aggregate solver }"
    )
    assert b.paths == 4


def test_the_graph_carries_the_branch_and_the_paths(tmp_path):
    path = _workflow(tmp_path, 'revise planner\naggregate solver branch 3 keep best by "score.py:length"')
    g = analyze(path.read_text(), str(path)).program.to_networkx()
    (node,) = [a for _, a in g.nodes(data=True) if a.get("agent") == "solver"]
    assert node["branch"] == {
        "count": 3,
        "keep": "best",
        "scorer": "score.py:length",
        "field": None,
        "cross": [],
        "joints": 3,
    }
    assert node["label"] == "aggregate solver branch 3 keep best"
    assert g.graph["max_paths"] == 1 and g.graph["max_events"] == 4


# ---- the executor ------------------------------------------------------------------------------------
TREE = "revise planner branch 2\naggregate solver branch 2\ntrain with (discount = 0.5)"
TREE_SCRIPT = {
    "planner": ["\\boxed{1}", "no box"],
    "solver": ["\\boxed{7}", "\\boxed{3}", "\\boxed{7}", "\\boxed{7}"],
}


def test_alternatives_are_one_prompt_sampled_in_one_batch(tmp_path):
    executor, backend, _ = _run(_workflow(tmp_path, TREE), TREE_SCRIPT)
    executor.run([TASK])
    planner, solvers = backend.calls  # one call per round: the planner's 2, then 2 per path
    assert len(planner) == 2 and planner[0] == planner[1]
    assert len(solvers) == 4 and solvers[0] == solvers[1] and solvers[2] == solvers[3]
    assert solvers[0] != solvers[2]  # each path's own state (its own planner output before it)


def test_a_tree_backs_its_returns_up(tmp_path):
    """Leaves: path .0.0 answers 7 (1), .0.1 answers 3 (0); path .1's planner was invalid (penalty -0.5),
    so its two leaves score 1 - 0.5 = 0.5. With discount 0.5 and mean backup:
    solvers on .0: 0.5 * 1 = 0.5 and 0.5 * 0 = 0 (V(.0) = 0.25); on .1: 0.25 and 0.25 (V(.1) = 0.25);
    planners: 0.5 * 0.25 = 0.125 each; the root: 0.125."""
    executor, _, _ = _run(_workflow(tmp_path, TREE), TREE_SCRIPT)
    (ep,) = executor.run([TASK])
    ids = [e.event_id.removeprefix("q/0") for e in ep.events]
    assert ids == ["/e1b0", "/e1b1", ".0/e2b0", ".0/e2b1", ".1/e2b0", ".1/e2b1"]
    parents = [e.parent and e.parent.removeprefix("q/0") for e in ep.events]
    assert parents == [None, None, "/e1b0", "/e1b0", "/e1b1", "/e1b1"]
    assert [e.tree_return for e in ep.events] == [0.125, 0.125, 0.5, 0.0, 0.25, 0.25]
    assert [e.branch.group.removeprefix("q/0") for e in ep.events] == ["/e1"] * 2 + [".0/e2"] * 2 + [
        ".1/e2"
    ] * 2
    assert ep.team_return == 0.125 and ep.reward == 0.75 and ep.invalid_actions == 1
    assert [(leaf.path, leaf.reward) for leaf in ep.leaves] == [
        (".0.0", 1.0),
        (".0.1", 0.0),
        (".1.0", 0.5),
        (".1.1", 0.5),
    ]
    assert ep.cost.calls == 6


def test_max_backup(tmp_path):
    executor, _, _ = _run(_workflow(tmp_path, TREE), TREE_SCRIPT, backup="max")
    (ep,) = executor.run([TASK])
    # V(.0) = max(0.5, 0) = 0.5, V(.1) = 0.25; planners 0.25 and 0.125; root max = 0.25
    assert [e.tree_return for e in ep.events] == [0.25, 0.125, 0.5, 0.0, 0.25, 0.25]
    assert ep.team_return == 0.25


def test_siblings_are_grouped_by_their_state(tmp_path):
    """srpo's `event` estimator: each sibling group normalised alone. Solvers on .0: returns 0.5, 0
    (mean 0.25, population std 0.25): +1, -1; every other group holds equal returns: 0."""
    executor, _, _ = _run(_workflow(tmp_path, TREE), TREE_SCRIPT)
    (ep,) = executor.run([TASK])
    rows = build_rows([to_trace(ep, "h")], "srpo")
    assert rows.returns.tolist() == [0.125, 0.125, 0.5, 0.0, 0.25, 0.25]
    assert torch.allclose(rows.advantages, torch.tensor([0.0, 0.0, 1.0, -1.0, 0.0, 0.0]), atol=1e-4)


def test_alternatives_from_different_states_are_compared_apart(tmp_path):
    """G = 2: the planners answer 1 and 2, so the solvers' alternatives come from two states. Their
    returns 1, 0 (rollout 0) and 1, 1 (rollout 1) are normalised per state: +1, -1 and 0, 0 (as one
    (prompt, step) group they would be +0.577, -1.732, +0.577, +0.577). The planners' returns are their
    trees' 0.5 and 1: -1, +1."""
    script = {
        "planner": ["\\boxed{1}", "\\boxed{2}"],
        "solver": ["\\boxed{7}", "\\boxed{3}", "\\boxed{7}", "\\boxed{7}"],
    }
    executor, _, _ = _run(_workflow(tmp_path, "revise planner\naggregate solver branch 2"), script)
    eps = executor.run([TASK], samples=2)
    rows = build_rows([to_trace(ep, "h") for ep in eps], "grpo")
    assert rows.returns.tolist() == [0.5, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert rows.advantages.tolist() == pytest.approx([-1.0, 1.0, -1.0, 1.0, 0.0, 0.0], abs=1e-4)


def test_at_the_first_decision_every_rollout_shares_the_state(tmp_path):
    """G = 2 rollouts branch at their first step: all four alternatives were sampled from the one state
    (the question), so they are one group: returns 1, 0, 1, 1 -> mean 0.75, std 0.433."""
    script = {"solver": ["\\boxed{7}", "\\boxed{3}", "\\boxed{7}", "\\boxed{7}"]}
    executor, _, _ = _run(_workflow(tmp_path, "aggregate solver branch 2"), script)
    eps = executor.run([TASK], samples=2)
    rows = build_rows([to_trace(ep, "h") for ep in eps], "srpo")
    third = 1 / 3**0.5
    assert rows.advantages.tolist() == pytest.approx([third, -3 * third, third, third], abs=1e-4)


PRUNED = "revise planner\naggregate solver branch 3 keep {rule} by exact_match(task.answer)"


def test_keep_best_continues_with_the_best_and_trains_every_alternative(tmp_path):
    script = {"planner": ["\\boxed{1}"], "solver": ["\\boxed{3}", "\\boxed{7}", "oops"]}
    executor, _, _ = _run(_workflow(tmp_path, PRUNED.format(rule="best")), script)
    (ep,) = executor.run([TASK])
    alternatives = ep.events[1:]
    assert [(e.branch.kept, e.branch.score) for e in alternatives] == [
        (False, 0.0),
        (True, 1.0),
        (False, 0.0),
    ]
    assert [e.tree_return for e in alternatives] == [0.0, 1.0, -0.5]  # the score, and -0.5 for "oops"
    assert ep.answer == "7" and ep.team_return == 1.0 and ep.leaves == [] and ep.invalid_actions == 1
    assert ep.events[0].tree_return is None  # the planner: the episode's return
    rows = build_rows([to_trace(ep, "h")], "srpo")
    assert rows.returns.tolist() == [1.0, 0.0, 1.0, -0.5] and rows.num_events == 4


def test_keep_first_keeps_the_first_valid(tmp_path):
    script = {"planner": ["\\boxed{1}"], "solver": ["oops", "\\boxed{3}", "\\boxed{7}"]}
    executor, _, _ = _run(_workflow(tmp_path, PRUNED.format(rule="first")), script)
    (ep,) = executor.run([TASK])
    assert [e.branch.kept for e in ep.events[1:]] == [False, True, False]
    assert ep.answer == "3" and ep.team_return == 0.0


def test_keep_random_is_seeded(tmp_path):
    script = {"planner": ["\\boxed{1}"], "solver": ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"]}
    path = _workflow(tmp_path, PRUNED.format(rule="random"))
    kept = []
    for seed in (0, 0, 1, 2, 3, 4):
        executor, _, _ = _run(path, script)
        (ep,) = executor.run([TASK], seed=seed)
        kept.append(next(e.branch.index for e in ep.events[1:] if e.branch.kept))
    assert kept[0] == kept[1] and len(set(kept)) > 1


def test_a_python_scorer(tmp_path):
    script = {"planner": ["\\boxed{1}"], "solver": ["\\boxed{12}", "\\boxed{7}"]}
    steps = 'revise planner\naggregate solver branch 2 keep best by "score.py:length"'
    executor, _, _ = _run(_workflow(tmp_path, steps), script)
    (ep,) = executor.run([TASK])
    assert [e.branch.score for e in ep.events[1:]] == [2.0, 1.0] and ep.answer == "12"


def test_evaluation_samples_each_branch_once(tmp_path):
    executor, backend, _ = _run(_workflow(tmp_path, TREE), TREE_SCRIPT)
    (ep,) = executor.run([TASK], branching=False)
    assert [len(c) for c in backend.calls] == [1, 1]
    assert [e.branch for e in ep.events] == [None, None] and ep.leaves == []
    assert [e.event_id for e in ep.events] == ["q/0/e1", "q/0/e2"]


def test_traces_record_the_tree_and_read_back(tmp_path):
    executor, _, _ = _run(_workflow(tmp_path, TREE), TREE_SCRIPT)
    (ep,) = executor.run([TASK])
    write_traces(tmp_path / "t.jsonl", [to_trace(ep, "h")])
    text = (tmp_path / "t.jsonl").read_text()
    assert '"schema":"srpo-trace/4"' in text and '"leaves"' in text
    (back,) = read_traces(tmp_path / "t.jsonl")
    assert back.events[2].branch.group == "q/0.0/e2" and back.events[2].parent == "q/0/e1b0"
    assert [e.tree_return for e in back.events] == [0.125, 0.125, 0.5, 0.0, 0.25, 0.25]
    assert len(back.leaves) == 4


def test_a_workflow_without_branches_writes_no_branch_keys(tmp_path):
    executor, _, _ = _run(_workflow(tmp_path, "revise planner\naggregate solver"), TREE_SCRIPT)
    (ep,) = executor.run([TASK])
    line = to_trace(ep, "h").model_dump_line()
    assert '"branch"' not in line and '"tree_return"' not in line and '"leaves"' not in line
    assert [e.event_id for e in ep.events] == ["q/0/e1", "q/0/e2"]


# ---- the shipped branching workflows, with scripted replies through the real environments -------------
ADD = json.loads((ROOT / "workflows/code_env/tasks.jsonl").read_text().splitlines()[0])


def _code(body: str) -> str:
    return f"<code>{body}</code>"


def test_code_at_grpo_keeps_the_best_candidate_of_each_agent():
    """Coder candidates: wrong, right, untagged (invalid), right: the first right one goes on (a tie: the
    first); the tester's: a right test, a wrong one, one right of two, untagged. Each candidate's return is
    its score, -0.1 for an invalid one; the kept pair passes, so the episode ends after one turn."""
    wf = load_workflow(ROOT / "workflows/code_at_grpo.srpo")
    script = {
        "coder": [
            _code("def add(a, b):\n    return a - b"),
            _code("def add(a, b):\n    return a + b"),
            "def add(a, b): return a + b",
            _code("def add(a, b):\n    return a + b if a > 0 else 0 if b == -a else a + b"),
        ],
        "tester": [
            "<tests>assert add(1, 1) == 2</tests>",
            "<tests>assert add(1, 1) == 3</tests>",
            "<tests>assert add(2, 2) == 4\nassert add(0, 0) == 1</tests>",
            "assert add(1, 1) == 2",
        ],
    }
    executor = Executor(wf.graph, {"lm": ScriptedBackend(script)}, wf.renderer(), build_tools(wf))
    (ep,) = executor.run([ADD])
    assert [(e.event_type, e.branch.kept) for e in ep.events] == [("act:coder", i == 1) for i in range(4)] + [
        ("act:tester", i == 0) for i in range(4)
    ]
    assert [e.tree_return for e in ep.events] == [0.0, 1.0, -0.1, 1.0, 1.0, 0.0, 0.5, -0.1]
    assert ep.team_return == 1.0 and ep.invalid_actions == 2 and ep.envs["sandbox"].done


def test_code_pair_backs_turn_scores_up_a_tree():
    """Turn 1: alternative 0 is right (score 1, the judge is done), alternative 1 subtracts (score 0). Path
    .1's turn 2: both right, the second without aux's tag (invalid: -0.1 on that leaf). Leaves 1.0, 1.0,
    0.9; with discount 0.9: .1's alternatives 1 + 0.9 * 1.0 = 1.9 and 1 + 0.9 * 0.9 = 1.81 (V(.1) = 1.855);
    the root's: 1 + 0.9 * 1.0 = 1.9 and 0 + 0.9 * 1.855 = 1.6695; the episode's return is their mean."""
    wf = load_workflow(ROOT / "workflows/code_pair.srpo")
    right, wrong = _code("def helper(a, b):\n    return a + b"), _code("def helper(a, b):\n    return a - b")
    main = _code("def add(a, b):\n    return helper(a, b)")
    script = {
        "aux": [right, wrong, right, "no tag"],
        "main": [main, main, main, _code("def add(a, b):\n    return a + b")],
    }
    executor = Executor(wf.graph, {"lm": ScriptedBackend(script)}, wf.renderer(), build_tools(wf))
    (ep,) = executor.run([ADD])
    assert [e.event_id.removeprefix("add/0") for e in ep.events] == ["/e1b0", "/e1b1", ".1/e2b0", ".1/e2b1"]
    assert [e.branch.score for e in ep.events] == [1.0, 0.0, 1.0, 1.0]
    assert [(leaf.path, leaf.reward) for leaf in ep.leaves] == [(".0", 1.0), (".1.0", 1.0), (".1.1", 0.9)]
    assert [e.tree_return for e in ep.events] == pytest.approx([1.9, 1.6695, 1.9, 1.81])
    assert ep.team_return == pytest.approx((1.9 + 1.6695) / 2)


def test_the_editor_and_the_formatter_know_the_branch_clause(tmp_path):
    from srpo_dsl.lang.tooling.format import format_source
    from srpo_dsl.lsp.completion import completions

    def labels(text: str) -> set[str]:
        return {item.label for item in completions(text, 0, len(text))}

    assert "branch" in labels("act s ") and "keep" not in labels("act s ")
    assert {"keep", "by"} <= labels("act s branch 2 ")
    assert labels("act s branch 2 keep ") == {"best", "random", "first"}
    messy = HEAD + "aggregate  solver   branch  2 keep best  by exact_match( task.answer )\n"
    tidy = format_source(messy)
    assert "aggregate solver branch 2 keep best by exact_match(task.answer)" in tidy
    assert format_source(tidy) == tidy


def test_a_version_2_trace_reads_with_the_new_fields_defaults(tmp_path):
    executor, _, _ = _run(_workflow(tmp_path, "revise planner\naggregate solver"), TREE_SCRIPT)
    (ep,) = executor.run([TASK])
    data = json.loads(to_trace(ep, "h").model_dump_line())
    data["schema"] = "srpo-trace/2"
    for event in data["events"]:
        del event["parent"]
    (tmp_path / "v2.jsonl").write_text(json.dumps(data) + "\n")
    (back,) = read_traces(tmp_path / "v2.jsonl")
    assert [(e.parent, e.branch, e.tree_return, e.path) for e in back.events] == [(None, None, None, "")] * 2
    assert back.leaves == [] and back.schema_ == "srpo-trace/2"
    assert '"schema":"srpo-trace/4"' in back.model_dump_line()


def test_the_viewer_lays_out_the_tree(tmp_path):
    from srpo_dsl.view.episodes import episode_json

    executor, _, _ = _run(_workflow(tmp_path, TREE), TREE_SCRIPT)
    (ep,) = executor.run([TASK])
    data = episode_json(None, to_trace(ep, "h"))
    shown = [(e["name"], e["depth"], e["after"], e["alt"], e["ret"], e["next"]) for e in data["events"]]
    assert shown == [
        (
            "/e1b0",
            1,
            "start",
            "1 of 2, kept",
            0.125,
            "→ aggregate:solver",
        ),  # depth first: a path, its subtree
        (".0/e2b0", 2, "/e1b0", "1 of 2, kept", 0.5, "→ end"),
        (".0/e2b1", 2, "/e1b0", "2 of 2, kept", 0.0, "→ end"),
        ("/e1b1", 1, "start", "2 of 2, kept", 0.125, "→ aggregate:solver"),
        (".1/e2b0", 2, "/e1b1", "1 of 2, kept", 0.25, "→ end"),
        (".1/e2b1", 2, "/e1b1", "2 of 2, kept", 0.25, "→ end"),
    ]
    assert data["leaves"][0] == [".0.0", 1.0, 1.0, "7"]
    script = {"planner": ["\\boxed{1}"], "solver": ["\\boxed{3}", "\\boxed{7}", "oops"]}
    executor, _, _ = _run(_workflow(tmp_path, PRUNED.format(rule="best")), script)
    (ep,) = executor.run([TASK])
    events = episode_json(None, to_trace(ep, "h"))["events"]
    assert [e["next"] for e in events[1:]] == [
        "pruned: this alternative ends here",
        "→ end",
        "pruned: this alternative ends here",
    ]
    assert events[1]["alt"] == "1 of 3, pruned, score 0"


def test_an_unknown_backup_is_e024_naming_the_known_ones(tmp_path):
    path = _workflow(tmp_path, "aggregate solver branch 2\ntrain with (backup = median)")
    found = [
        (d.code, d.message) for d in analyze(path.read_text(), str(path)).diagnostics if d.severity == "error"
    ]
    assert len(found) == 1 and found[0][0] == "E024" and "'mean' or 'max'" in found[0][1]
