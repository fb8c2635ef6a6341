"""Credit per member and per round (docs/objective.md §5): reward keys, their resolution, each
estimator's advantages against hand-computed values, bad keys, traces, the solver-judge workflow."""

import ast
import shutil
from pathlib import Path

import pytest
import torch

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime.credit import CreditKey, member_return, role_rounds, rounds_taken
from srpo_dsl.runtime.episode import Episode
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import load_workflow, task_data
from srpo_dsl.runtime.traces import read_traces, to_trace, write_traces
from srpo_dsl.runtime.usercode import UserCodeError
from tests.support.episodes import make_event, make_member

ROOT = Path(__file__).resolve().parents[2]


def test_keys_parse_into_role_replica_and_round():
    assert CreditKey.parse("judge") == CreditKey("judge")
    assert CreditKey.parse("solver#2") == CreditKey("solver", 2)
    assert CreditKey.parse("writer@3") == CreditKey("writer", None, 3)
    assert CreditKey.parse("debater#01@2") == CreditKey("debater", 1, 2)
    assert str(CreditKey("debater", 1, 2)) == "debater#1@2"
    for bad in ("solver#", "solver@x", "solver@2#1", "2solver", "", 3, ("solver", 1)):
        assert CreditKey.parse(bad) is None


def test_the_most_specific_key_wins():
    returns = {"d": 1.0, "d#2": 2.0, "d@2": 3.0, "d#2@2": 4.0}
    assert member_return(returns, -9.0, "d", 2, 2) == 4.0  # replica and round
    assert member_return(returns, -9.0, "d", 2, 1) == 2.0  # replica
    assert member_return(returns, -9.0, "d", 1, 2) == 3.0  # round
    assert member_return(returns, -9.0, "d", 1, 1) == 1.0  # role
    assert member_return(returns, -9.0, "e", 1, 1) == -9.0  # the episode's
    assert member_return({"d#2": 2.0}, -9.0, "d", 1, 1) == -9.0


def test_rounds_count_each_roles_events():
    events = [
        make_event("p/0", 1, "a", make_member("w", 1)),
        make_event("p/0", 2, "b", make_member("j", 1)),
        make_event("p/0", 3, "a", make_member("w", 1), make_member("w", 2, 1)),
    ]
    assert role_rounds(events) == [{"w": 1}, {"j": 1}, {"w": 2}]
    assert rounds_taken(events) == {"w": 2, "j": 1}


def _solver_judge(sample: int, solvers: tuple[float, float], judge: float) -> Episode:
    ep = Episode(f"p/{sample}", "p", sample, {})
    ep.events = [
        make_event(
            ep.episode_id, 1, "parallel:solver", make_member("solver", 1), make_member("solver", 2, 1)
        ),
        make_event(ep.episode_id, 2, "aggregate:judge", make_member("judge", 1)),
    ]
    ep.record_returns(judge, judge, {"judge": judge, "solver#1": solvers[0], "solver#2": solvers[1]})
    return ep


def _by_row(rows) -> dict[tuple[str, int], float]:
    return {m: round(float(a), 4) for m, a in zip(rows.members, rows.advantages)}


# docs/objective.md's worked example: rows (solver 1, solver 2, judge) of rollout 0, then of rollout 1
SOLVER_JUDGE = {
    "srpo": [0.0, 0.0, 1.0, 0.0, 0.0, -1.0],
    "grpo": [1.0, -1.0, 1.0, -1.0, 1.0, -1.0],
    "seq": [1.0, -1.0, 1.0, -1.0, 1.0, -1.0],
    "drmas": [1.0, -1.0, 1.0, -1.0, 1.0, -1.0],
}


@pytest.mark.parametrize("objective", sorted(SOLVER_JUDGE))
def test_each_estimator_on_the_solver_judge_example(objective):
    rows = build_rows([_solver_judge(0, (1.0, 0.0), 1.0), _solver_judge(1, (0.0, 1.0), 0.0)], objective)
    assert rows.returns.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    torch.testing.assert_close(rows.advantages, torch.tensor(SOLVER_JUDGE[objective]), atol=1e-5, rtol=0)


def test_drmas_pools_a_roles_steps_and_grpo_does_not():
    """A role at two steps: grpo groups each step apart, drmas all of the role's rows (hand-computed)."""
    eps = []
    for sample, (first, second) in enumerate([(1.0, 3.0), (0.0, 0.0)]):
        ep = Episode(f"p/{sample}", "p", sample, {})
        ep.events = [
            make_event(ep.episode_id, 1, "s1", make_member("w", 1)),
            make_event(ep.episode_id, 2, "s2", make_member("w", 1)),
        ]
        ep.record_returns(0.0, 0.0, {"w@1": first, "w@2": second})
        eps.append(ep)
    grpo = build_rows(eps, "grpo").advantages  # groups s1: [1, 0], s2: [3, 0]
    torch.testing.assert_close(grpo, torch.tensor([1.0, 1.0, -1.0, -1.0]), atol=1e-5, rtol=0)
    # drmas: one group [1, 3, 0, 0], mean 1, population std sqrt((0 + 4 + 1 + 1) / 4) = sqrt(1.5)
    std = 1.5**0.5
    drmas = build_rows(eps, "drmas").advantages
    torch.testing.assert_close(drmas, torch.tensor([0.0, 2 / std, -1 / std, -1 / std]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("objective", ["srpo", "grpo", "seq", "drmas"])
def test_per_round_credit_of_the_doc_example(objective):
    """`{"writer": r, "writer@1": 0.5 * r}`: returns 0.5, 1, 0, 0 in one group (mean 0.375, std 0.41458)."""
    eps = []
    for sample, r in enumerate([1.0, 0.0]):
        ep = Episode(f"p/{sample}", "p", sample, {})
        ep.events = [make_event(ep.episode_id, n, "loop:writer", make_member("writer", 1)) for n in (1, 2)]
        ep.record_returns(r, r, {"writer": r, "writer@1": 0.5 * r})
        eps.append(ep)
    rows = build_rows(eps, objective)
    assert rows.returns.tolist() == [0.5, 1.0, 0.0, 0.0]
    expected = torch.tensor([0.3015, 1.5076, -0.9045, -0.9045])
    torch.testing.assert_close(rows.advantages, expected, atol=1e-4, rtol=0)


def test_keyed_returns_survive_the_trace_round_trip(tmp_path):
    ep = _solver_judge(0, (1.0, 0.0), 1.0)
    write_traces(tmp_path / "t.jsonl", [to_trace(ep, "h")])
    (back,) = read_traces(tmp_path / "t.jsonl")
    assert back.role_rewards == {"judge": 1.0, "solver#1": 1.0, "solver#2": 0.0}
    assert [back.return_of("solver", r, 1) for r in (1, 2)] == [1.0, 0.0]
    assert build_rows([back], "grpo").returns.tolist() == build_rows([ep], "grpo").returns.tolist()


def test_old_traces_read_with_the_team_return():
    episodes = read_traces(ROOT / "tests/data/old_run/traces.jsonl")
    rows = build_rows(episodes, "srpo")
    by_episode = {e.event_id: ep.team_return for ep in episodes for e in ep.events}
    assert rows.returns.tolist() == [by_episode[event] for event, _ in rows.members]


SCRIPT = {
    # rollout 0: solvers 125 (right), 124; the judge gives 125. Rollout 1: 124, 125 (right); the judge gives 124
    "solver": ["\\boxed{125}", "\\boxed{124}", "\\boxed{124}", "\\boxed{125}"],
    "judge": ["\\boxed{125}", "\\boxed{124}"],
}


def _run(folder: Path, reward_code: str | None = None) -> list[Episode]:
    """workflows/solver_judge.srpo (copied to `folder`, its reward replaced by `reward_code` if given),
    two rollouts of its first task (70+55) with the scripted backend."""
    shutil.copy(ROOT / "workflows/solver_judge.srpo", folder)
    shutil.copytree(ROOT / "workflows/solver_judge", folder / "solver_judge")
    (folder / "solver_judge.py").write_text(reward_code or (ROOT / "workflows/solver_judge.py").read_text())
    wf = load_workflow(folder / "solver_judge.srpo")
    executor = Executor(wf.graph, {"lm": ScriptedBackend(SCRIPT)}, wf.renderer())
    return executor.run(task_data(wf, limit=1), samples=2)


def test_the_solver_judge_workflow_credits_each_solver_on_its_own_answer(tmp_path):
    episodes = _run(tmp_path)
    assert [ep.keyed_returns for ep in episodes] == [
        {"solver#1": 1.0, "solver#2": 0.0, "judge": 1.0},
        {"solver#1": 0.0, "solver#2": 1.0, "judge": 0.0},
    ]
    assert [ep.reward for ep in episodes] == [1.0, 0.0]
    for objective, advantages in SOLVER_JUDGE.items():
        rows = build_rows(episodes, objective)
        assert [(r, m[1]) for r, m in zip(rows.roles, rows.members)][:3] == [
            ("solver", 0),
            ("solver", 1),
            ("judge", 0),
        ]
        torch.testing.assert_close(rows.advantages, torch.tensor(advantages), atol=1e-5, rtol=0)


def test_a_reward_reads_rounds_and_replicas_off_the_episode(tmp_path):
    code = (
        "def reward(answer, row, episode):\n"
        "    keys = {f'{e.role}#{m.replica}@{e.round}': float(m.replica) for e in episode.events for m in e.members}\n"
        "    return {'judge': 0.5, **keys}\n"
    )
    ep = _run(tmp_path, code)[0]
    assert ep.keyed_returns == {"judge": 0.5, "judge#1@1": 1.0, "solver#1@1": 1.0, "solver#2@1": 2.0}
    solvers, judge = ep.events  # the keys are resolved once, when the reward is recorded
    assert ep.returns == {(solvers.event_id, 0): 1.0, (solvers.event_id, 1): 2.0, (judge.event_id, 0): 1.0}


def test_a_trace_read_back_resolves_its_keys_once_into_the_same_returns(tmp_path):
    ep = _solver_judge(0, (1.0, 0.0), 1.0)
    write_traces(tmp_path / "t.jsonl", [to_trace(ep, "h")])
    (back,) = read_traces(tmp_path / "t.jsonl")
    assert back.returns == ep.returns and back.team_return == ep.team_return == back.reward
    assert ep.returns == {("p/0/e1", 0): 1.0, ("p/0/e1", 1): 0.0, ("p/0/e2", 0): 1.0}


def test_the_rows_read_returns_and_never_resolve_credit_keys():
    """Credit is resolved once, where the reward is recorded (runtime): the rows read the result."""
    source = (ROOT / "srpo_dsl/rl/objective/rows.py").read_text()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not any(name.startswith("srpo_dsl.runtime") for name in imported)


@pytest.mark.parametrize(
    "value,reason",
    [
        ("{'judge': 1.0, 'solver#x': 1.0}", ["returned the key(s) ['solver#x'] on answer '125', task "]),
        ("{'judge': 1.0, 7: 1.0}", ["returned the key(s) [7] on answer", "a key is ROLE, ROLE#REPLICA"]),
        (
            "{'judge': 1.0, 'coder#1': 1.0}",
            ["returned scores for ['coder#1'] on", "the roles are solver, judge"],
        ),
        (
            "{'judge': 1.0, 'solver#3': 1.0}",
            [
                "returned the key 'solver#3' on answer '125', task 'arith-train-0-0': `solver` has replicas 1..2"
            ],
        ),
        ("{'judge': 1.0, 'solver#0': 1.0}", ["`solver` has replicas 1..2"]),
        (
            "{'judge': 1.0, 'solver@0': 1.0}",
            ["rounds count from 1, and `solver` took 1 round(s) in this episode"],
        ),
        ("{'judge': 1.0, 'solver#1@2': 1.0}", ["returned the key 'solver#1@2' on", "took 1 round(s)"]),
        (
            "{'judge': 1.0, 'solver#1': float('nan')}",
            ["returned {'solver#1': nan} on", "every score is a finite"],
        ),
        ("{'judge': 1.0, 'solver#1': 1.0, 'solver#01': 0.0}", ["two keys name the same members"]),
        ("{'solver#1': 1.0}", ["returned no score for the rewarded agent `judge`"]),
    ],
)
def test_a_bad_key_is_one_error_at_the_reward(tmp_path, value, reason):
    code = f"def reward(answer, row, episode):\n    return {value}\n"
    with pytest.raises(UserCodeError) as err:
        _run(tmp_path, code)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'solver_judge.py'}:1: reward() returned ")
    assert "\n" not in message and all(part in message for part in reason)
