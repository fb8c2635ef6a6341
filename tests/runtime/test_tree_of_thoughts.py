"""The shipped Tree-of-Thoughts workflow (workflows/tree_of_thoughts.srpo): the environment shows the puzzle
before anyone acts, chooses how many proposers extend its best thought each round, evaluates their steps,
says `solved` or `expand`; its credit per proposer and round, and each objective's advantages, against
the hand-computed table of docs/objective.md ("Credit from an environment")."""

import json
import sys
from fractions import Fraction

import pytest
import torch

from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime.traces import read_traces
from tests.support.clitools import ROOT, cli

WORKFLOW = ROOT / "workflows/tree_of_thoughts.srpo"

# Two rollouts (G = 2) of the first puzzle, 4 7 10 11. The scripted replies are served in request order:
# each round, rollout 0's proposers, then rollout 1's.
REPLIES = [
    # round 1: rollout 0 (3 proposers): two steps that can still make 24, one that cannot
    "10 - 4 = 6",
    "11 - 7 = 4",
    "4 * 7 = 28",
    # round 1: rollout 1 (3 proposers): none can
    "4 * 7 = 28",
    "4 * 7 = 28",
    "4 * 7 = 28",
    # round 2: rollout 0 (6 7 11 left, 2 proposers); rollout 1 (all 3 again, from 4 7 10 11)
    "11 - 7 = 4",
    "6 * 7 = 42",
    "11 - 7 = 4",
    "4 * 7 = 28",
    "4 * 7 = 28",
    # round 3: rollout 0 (4 6 left, 1 proposer) solves it; rollout 1 (4 4 10 left, 2 proposers)
    "4 * 6 = 24",
    "10 - 4 = 6",
    "4 * 4 = 16",
    # round 4: rollout 1 (4 6 left, 1 proposer) solves it
    "4 * 6 = 24",
]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tot")
    script = folder / "replies.json"
    script.write_text(json.dumps({"proposer": [f"<thought>{r}</thought>" for r in REPLIES]}))
    out = folder / "out"
    r = cli(
        "run", WORKFLOW, "--backend", "scripted", "--model", script, "--limit", "1", "-G", "2", "--out", out
    )
    assert r.returncode == 0, r.stderr
    return read_traces(out / "traces.jsonl")


def test_the_environment_chooses_the_fan_out_and_ends_the_search(traces):
    first, second = traces
    assert [[m.replica for m in e.members] for e in first.events] == [[1, 2, 3], [1, 2], [1]]
    assert [[m.replica for m in e.members] for e in second.events] == [[1, 2, 3], [1, 2, 3], [1, 2], [1]]
    assert {e.event_type for ep in traces for e in ep.events} == {"parallel:proposer"}
    assert first.envs["tree"].words == ["expand", "expand", "expand", "solved"]
    assert second.envs["tree"].words == ["expand", "expand", "expand", "expand", "solved"]
    assert [ep.score for ep in traces] == [1.0, 1.0] and [ep.invalid_actions for ep in traces] == [0, 0]


def test_every_prompt_sees_the_best_thought_so_far(traces):
    first, second = traces
    prompts = [bytes(e.members[0].prompt_token_ids).decode() for e in first.events]
    assert (
        "Use 4 7 10 11 and + - * / to make 24.\nNumbers left: 4 7 10 11\nSteps so far: none yet" in prompts[0]
    )
    assert (
        "Numbers left: 6 7 11\nSteps so far: 10 - 4 = 6\nLast round: proposer 1: can make 24; " in prompts[1]
    )
    assert "proposer 3: cannot make 24" in prompts[1]
    assert "Numbers left: 4 6\nSteps so far: 10 - 4 = 6; 11 - 7 = 4" in prompts[2]
    stuck = bytes(second.events[1].members[0].prompt_token_ids).decode()
    assert "Numbers left: 4 7 10 11\nSteps so far: none yet\nLast round: proposer 1: cannot make 24" in stuck
    assert first.events[-1].observations == [
        {
            "env": "tree",
            "agent": "proposer",
            "result": "Solved. Numbers left: 24\nSteps so far: 10 - 4 = 6; 11 - 7 = 4; 4 * 6 = 24",
        }
    ]


# docs/objective.md, "Credit from an environment": each member's return, summed over the steps.
RETURNS = [
    [[1.5, 1.5, 1.0], [1.5, 1.0], [1.5]],
    [[1.0, 1.0, 1.0], [1.5, 1.0, 1.0], [1.5, 1.0], [1.5]],
]
S = 194**0.5  # srpo: the events' returns x 84 deviate from their mean (108) by 4, -3, 18, -24, -10, -3, 18
R = 56**0.5  # row: 7 returns of 1.5 and 8 of 1.0, x 30, deviate from their mean (37) by 8 and -7
ADVANTAGES = {
    "srpo": [4 / S] * 3 + [-3 / S] * 2 + [18 / S] + [-24 / S] * 3 + [-10 / S] * 3 + [-3 / S] * 2 + [18 / S],
    "grpo": [{1.5: 8 / R, 1.0: -7 / R}[r] for ep in RETURNS for event in ep for r in event],
}


def test_each_proposer_gets_its_own_steps_credit(traces):
    returns = [
        [[ep.return_of(m.role, m.replica, n) for m in e.members] for n, e in enumerate(ep.events, 1)]
        for ep in traces
    ]
    assert returns == RETURNS
    assert traces[0].role_rewards["proposer#1@1"] == 1.5 and traces[1].role_rewards["proposer#3@2"] == 1.0


@pytest.mark.parametrize("objective", ["srpo", "grpo", "seq", "drmas"])
def test_each_objectives_advantages_match_the_table(traces, objective):
    rows = build_rows(traces, objective)
    expected = ADVANTAGES["srpo" if objective == "srpo" else "grpo"]  # one role, one step: row = agent
    torch.testing.assert_close(rows.advantages, torch.tensor(expected), atol=1e-4, rtol=0)


def test_the_evaluation_counts_the_ways_left_to_make_the_target():
    sys.path.insert(0, str(ROOT / "workflows"))
    try:
        from tree_of_thoughts import apply, ways
    finally:
        sys.path.remove(str(ROOT / "workflows"))
    f = lambda *xs: tuple(Fraction(x) for x in xs)  # noqa: E731
    assert ways(f(4, 6), Fraction(24)) == 1  # 4 * 6
    assert ways(f(4, 4, 10), Fraction(24)) == 2  # (10 - 4) * 4, twice: either 4 is taken first
    assert ways(f(10, 11, 28), Fraction(24)) == 0
    assert apply(f(4, 7, 10, 11), "11 - 7 = 4") == (f(4, 4, 10), "")
    assert apply(f(4, 7, 10, 11), "11 - 7 = 5") == (None, "`11 - 7 = 5`: 11 - 7 is not 5")
    assert apply(f(4, 7, 10, 11), "7 - 7 = 0") == (None, "`7 - 7 = 0`: 7 is not among the numbers left")
    assert apply(f(1, 3), "1 / 3 = 1/3") == (f(Fraction(1, 3)), "")
    assert apply(f(0, 3), "3 / 0 = 0")[0] is None and apply(f(4, 7), "4 ^ 7 = 1")[0] is None
