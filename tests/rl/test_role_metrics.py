"""Per-role and per-event-type metrics: hand-computed values on a tiny hand-built step, the objectives'
per-row clip counts, and one real short training run (metrics.jsonl, eval.jsonl, TensorBoard, plot)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from srpo_dsl.rl.loop.role_metrics import (
    MetricKeys,
    keyed_metrics,
    role_invalid_rates,
    role_invalid_sums,
    rollout_sums,
    step_sums,
)
from srpo_dsl.rl.objective.losses import get_objective
from srpo_dsl.runtime.episode import Episode, Event, Member

ROOT = Path(__file__).resolve().parents[2]
# two roles; the solver acts in two event types; the writer never acts in these episodes
KEYS = MetricKeys(
    ("solver", "judge", "writer"),
    ("parallel:solver", "revise:solver", "verify:judge", "aggregate:writer"),
)


def member(role: str, valid: bool, tokens: int) -> Member:
    return Member(0, role, 1, "lm", 0, [1], [7] * tokens, [-1.0] * tokens, "", valid)


def episodes() -> list[Episode]:
    """parallel:solver: a complete K=2 event and an incomplete one (1 of 2); revise:solver; two verify:judge."""
    one, two = Episode("q/0", "q", 0, {}), Episode("q/1", "q", 1, {})
    one.events = [
        Event(
            "e1",
            "parallel:solver",
            "n1",
            "s",
            2,
            True,
            [member("solver", True, 3), member("solver", False, 1)],
        ),
        Event("e2", "verify:judge", "n3", "s", 1, True, [member("judge", True, 2)]),
    ]
    two.events = [
        Event("e3", "parallel:solver", "n1", "s", 2, False, [member("solver", False, 5)]),
        Event("e4", "revise:solver", "n2", "s", 1, True, [member("solver", True, 4)]),
        Event("e5", "verify:judge", "n3", "s", 1, True, [member("judge", False, 6)]),
    ]
    return [one, two]


@dataclass(frozen=True)
class TrainedRows:
    """What the keyed sums read from the training rows (the rows of e1, e2 and e4)."""

    event_types: list[str]
    advantages: torch.Tensor

    @property
    def roles(self) -> list[str]:
        return [t.split(":")[1] for t in self.event_types]  # one agent per event type here


ROWS = TrainedRows(
    ["parallel:solver", "parallel:solver", "verify:judge", "revise:solver"],
    torch.tensor([0.5, 0.5, -1.0, 2.0]),
)


def test_rollout_sums_per_role_and_event_type_by_hand() -> None:
    sums = rollout_sums(KEYS, episodes())  # events, members, invalid members, response tokens
    assert sums.tolist() == [
        [3, 4, 2, 13],  # role solver = parallel:solver + revise:solver
        [2, 2, 1, 8],  # role judge
        [0, 0, 0, 0],  # role writer: no event
        [2, 3, 2, 9],  # parallel:solver, the incomplete event included
        [1, 1, 0, 4],
        [2, 2, 1, 8],
        [0, 0, 0, 0],
    ]


def test_keyed_metrics_by_hand() -> None:
    clip = {"role/solver/clip_fraction": 0.25, "event/verify:judge/clip_fraction": 0.5, "clip_fraction": 0.3}
    got = keyed_metrics(KEYS, step_sums(KEYS, episodes(), ROWS), clip)
    assert got == pytest.approx(
        {
            "role/solver/events": 3,
            "role/solver/mean_k": 4 / 3,
            "role/solver/invalid_rate": 2 / 4,
            "role/solver/response_length": 13 / 4,
            "role/solver/abs_advantage": (0.5 + 0.5 + 2.0) / 3,
            "role/solver/clip_fraction": 0.25,
            "role/judge/events": 2,
            "role/judge/mean_k": 1,
            "role/judge/invalid_rate": 1 / 2,
            "role/judge/response_length": 4,
            "role/judge/abs_advantage": 1,
            "role/writer/events": 0,  # its ratios are 0 / 0: left out
            "event/parallel:solver/events": 2,
            "event/parallel:solver/mean_k": 3 / 2,
            "event/parallel:solver/invalid_rate": 2 / 3,
            "event/parallel:solver/response_length": 3,
            "event/parallel:solver/abs_advantage": 0.5,
            "event/revise:solver/events": 1,
            "event/revise:solver/mean_k": 1,
            "event/revise:solver/invalid_rate": 0,
            "event/revise:solver/response_length": 4,
            "event/revise:solver/abs_advantage": 2,
            "event/verify:judge/events": 2,
            "event/verify:judge/mean_k": 1,
            "event/verify:judge/invalid_rate": 1 / 2,
            "event/verify:judge/response_length": 4,
            "event/verify:judge/abs_advantage": 1,
            "event/verify:judge/clip_fraction": 0.5,
            "event/aggregate:writer/events": 0,
        }
    )
    assert list(got)[:6] == [f"role/solver/{m}" for m in ("events", "mean_k", "invalid_rate")] + [
        f"role/solver/{m}" for m in ("response_length", "abs_advantage", "clip_fraction")
    ]


def test_sums_of_two_ranks_add_up_to_one_rank() -> None:
    """The flat sums are what all_reduce adds: two ranks' shares give the one-process metrics."""
    eps = episodes()
    first = TrainedRows(ROWS.event_types[:2], ROWS.advantages[:2])
    second = TrainedRows(ROWS.event_types[2:], ROWS.advantages[2:])
    a, b = step_sums(KEYS, eps[:1], first), step_sums(KEYS, eps[1:], second)
    assert keyed_metrics(KEYS, [x + y for x, y in zip(a, b)], {}) == pytest.approx(
        keyed_metrics(KEYS, step_sums(KEYS, eps, ROWS), {})
    )
    idle = step_sums(KEYS, [], TrainedRows([], torch.zeros(0)))  # a rank without prompts
    assert idle == [0.0] * len(a) and len(a) == 7 * 6


def test_role_invalid_rates_and_clip_ratios() -> None:
    assert role_invalid_rates(KEYS, role_invalid_sums(KEYS, episodes())) == {"solver": 0.5, "judge": 0.5}
    # (clipped, units) per key: role solver 1 of 4, judge 0 of 2, writer none; event types alike
    sums = [1, 4, 0, 2, 0, 0, 1, 3, 0, 1, 0, 2, 0, 0]
    assert KEYS.ratios("clip_fraction", sums) == {
        "role/solver/clip_fraction": 0.25,
        "role/judge/clip_fraction": 0.0,
        "event/parallel:solver/clip_fraction": 1 / 3,
        "event/revise:solver/clip_fraction": 0.0,
        "event/verify:judge/clip_fraction": 0.0,
    }


def test_an_event_type_outside_the_graph_is_one_line() -> None:
    stray = Episode("q/2", "q", 2, {})
    stray.events = [Event("e9", "route:router", "n9", "s", 1, True, [member("router", True, 1)])]
    with pytest.raises(ValueError, match=r"^event type 'route:router' is not in the workflow's graph$"):
        rollout_sums(KEYS, [stray])


def test_keys_of_a_compiled_workflow() -> None:
    from srpo_dsl.runtime.setup import load_workflow

    keys = MetricKeys.of(load_workflow(ROOT / "workflows" / "math_fixed.srpo").graph)
    assert keys.roles == ("solver", "verifier", "aggregator")
    assert keys.event_types == (
        "parallel:solver",
        "verify:verifier",
        "revise:solver",
        "verify:verifier#2",
        "aggregate:aggregator",
    )
    assert keys.prefixes[:3] == ["role/solver", "role/verifier", "role/aggregator"]


# --- the objectives' clip counts per row --------------------------------------------------------


def row_clips(objective: str, log_ratio: list[list[float]], mask: list[list[bool]], events, advantages):
    """[B, 2] per-row (clipped units, units) and the objective's aggregate clip fraction."""
    old = torch.full((len(log_ratio), len(log_ratio[0])), -2.0)
    _, metrics, terms = get_objective(objective).evaluate(
        old + torch.tensor(log_ratio),
        old,
        torch.tensor(mask),
        torch.tensor(events),
        torch.tensor(advantages),
        clip_eps=0.2,
    )
    clips = terms.row_clips(len(events))
    assert metrics["clip_fraction"] == pytest.approx(float(clips[:, 0].sum() / clips[:, 1].sum()))
    return clips.tolist()


LOG_RATIO = [[0.1, 0.0], [0.5, 0.0], [0.5, 0.0]]
ONE_TOKEN = [[True, False]] * 3


def test_srpo_counts_each_event_once_on_its_first_row() -> None:
    # event 9 (row 0): exp(0.1) = 1.105 < 1.2, kept; event 5 (rows 1, 2): exp((0.5 + 0.5) / sqrt 2) = 2.03, clipped
    assert row_clips("srpo", LOG_RATIO, ONE_TOKEN, [9, 5, 5], [1.0, 1.0, 1.0]) == [[0, 1], [1, 1], [0, 0]]


def test_seq_counts_every_row() -> None:
    assert row_clips("seq", LOG_RATIO, ONE_TOKEN, [9, 5, 5], [1.0, 1.0, 1.0]) == [[0, 1], [1, 1], [1, 1]]


@pytest.mark.parametrize("objective", ["grpo", "drmas"])
def test_token_losses_count_the_tokens_of_each_row(objective: str) -> None:
    # row 0 (A = +1): exp(0.5) clipped, exp(0) kept, the third token is padding;
    # row 1 (A = -1): exp(-0.5) = 0.61 < 0.8 clipped, exp(0.1) and exp(0) kept
    log_ratio = [[0.5, 0.0, 9.0], [-0.5, 0.1, 0.0]]
    mask = [[True, True, False], [True, True, True]]
    assert row_clips(objective, log_ratio, mask, [0, 1], [1.0, -1.0]) == [[1, 2], [1, 3]]


# --- a real short training run ------------------------------------------------------------------

TEAM = """\
workflow team
policy lm = hf("model") with (temperature = 1.0)
task arith(n = 16, seed = 0, max_operand = 9, eval_n = 4)
agent solver[2]  uses lm prompt "solver.j2" emits boxed with (max_tokens = 6)
agent aggregator uses lm prompt "aggregator.j2" emits text with (max_tokens = 5)
parallel solver
aggregate aggregator
reward exact_match(aggregator, task.answer) invalid -0.1
train with (objective = grpo, group = 2, batch = 4, steps = 1, epochs = 2, micro_batches = 2, lr = 0.05,
            clip = 0.001, eval_size = 2, eval_k = 2)
"""


@pytest.fixture(scope="module")
def team_run(tmp_path_factory: pytest.TempPathFactory, tiny_random_model: Path) -> Path:
    """One grpo step of 4 prompts x 2 rollouts (a K=2 solver event, a singleton aggregator event).

    A random model never answers right: the reward is the parity of the answer's length instead.
    """
    from srpo_dsl.envs.rewards import REWARDS
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import train

    folder = tmp_path_factory.mktemp("team")
    (folder / "solver.j2").write_text("S {{ task.question }}=")
    (folder / "aggregator.j2").write_text("A {{ task.question }}=")
    (folder / "team.srpo").write_text(TEAM)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(REWARDS, "exact_match", lambda pred, task, field: float(len(pred or "") % 2))
        train(
            plan_file(
                folder / "team.srpo", folder / "run", models={"lm": str(tiny_random_model)}, device="cpu"
            ),
            progress=False,
        )
    torch.set_num_threads(threads)
    return folder / "run"


def test_a_training_step_logs_the_metrics_of_its_rollouts(team_run: Path) -> None:
    from srpo_dsl.runtime.traces import read_traces

    (row,) = [json.loads(line) for line in (team_run / "metrics.jsonl").read_text().splitlines()]
    traces = read_traces(team_run / "traces.jsonl")  # the rollouts of the last (checkpointed) step
    assert len(traces) == 8 and row["dropped_events"] == 0
    tokens = {}  # generated tokens per role: what grpo clips, once per epoch
    for role, event_type, k in (("solver", "parallel:solver", 2), ("aggregator", "aggregate:aggregator", 1)):
        members = [m for t in traces for e in t.events if e.event_type == event_type for m in e.members]
        tokens[role] = 2 * sum(len(m.response_token_ids) for m in members)
        expected = {
            "events": 8,
            "mean_k": k,
            "invalid_rate": sum(not m.valid for m in members) / len(members),
            "response_length": sum(len(m.response_token_ids) for m in members) / len(members),
        }
        for name, value in expected.items():
            assert row[f"role/{role}/{name}"] == row[f"event/{event_type}/{name}"] == pytest.approx(value)
        assert row[f"role/{role}/abs_advantage"] >= 0
    # the global fraction is the roles' fractions weighted by their tokens
    weighted = sum(row[f"role/{r}/clip_fraction"] * n for r, n in tokens.items()) / sum(tokens.values())
    assert row["clip_fraction"] == pytest.approx(weighted)
    assert 0 < row["role/solver/clip_fraction"] != row["role/aggregator/clip_fraction"] > 0
    assert all(math.isfinite(v) for v in row.values())


def test_the_traces_record_what_the_update_did_with_each_event(team_run: Path) -> None:
    """Each event's advantages are its rows' (recomputed from the traces); its clip fractions, weighted by
    its tokens, give back the event type's logged clip fraction (grpo clips tokens)."""
    from srpo_dsl.rl.objective.rows import build_rows
    from srpo_dsl.runtime.traces import read_traces

    (row,) = [json.loads(line) for line in (team_run / "metrics.jsonl").read_text().splitlines()]
    traces = read_traces(team_run / "traces.jsonl")
    rows = build_rows(traces, "grpo")
    advantage = dict(zip(rows.members, rows.advantages.tolist()))
    events = [e for t in traces for e in t.events]
    assert all(e.update is not None for e in events) and len(advantage) == 24
    for e in events:
        assert e.update.advantages == pytest.approx(
            [advantage[e.event_id, m.member_index] for m in e.members]
        )
    for event_type in ("parallel:solver", "aggregate:aggregator"):
        typed = [e for e in events if e.event_type == event_type]
        tokens = [sum(len(m.response_token_ids) for m in e.members) for e in typed]
        weighted = sum(e.update.clip_fraction * n for e, n in zip(typed, tokens)) / sum(tokens)
        assert weighted == pytest.approx(row[f"event/{event_type}/clip_fraction"])
    assert len({e.update.clip_fraction for e in events}) > 2  # fractions of tokens, not one flag
    from srpo_dsl.lang.compile.graph_formats import from_json

    assert from_json((team_run / "graph.json").read_text()).graph["hash"] == traces[0].graph_hash


def test_evaluation_and_tensorboard_get_the_role_metrics(team_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    evals = [json.loads(line) for line in (team_run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 1]
    for e in evals:
        assert 0 <= e["role/solver/invalid_rate"] <= 1 and e["role/aggregator/invalid_rate"] == 0.0
    tb = EventAccumulator(str(team_run / "tb"))
    tb.Reload()
    tags = set(tb.Tags()["scalars"])
    assert {
        "train/role/solver/invalid_rate",
        "train/event/parallel:solver/mean_k",
        "train/role/aggregator/clip_fraction",
        "eval/role/solver/invalid_rate",
    } <= tags


def test_plot_adds_the_per_role_panels(team_run: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from srpo_dsl.cli.main import app

    result = CliRunner().invoke(app, ["plot", str(team_run), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {"role_invalid_rate.png", "role_response_length.png", "heldout.png"} <= {
        p.name for p in tmp_path.iterdir()
    }


def test_eval_reports_the_invalid_rate_of_each_role(tmp_path: Path) -> None:
    """Scripted replies: every third solver output and every second aggregator output are invalid."""
    from typer.testing import CliRunner

    from srpo_dsl.cli.main import app

    script = {
        "solver": ["\\boxed{4}", "no box", "\\boxed{5}"],
        "verifier": ["<verify>approve</verify>"],
        "aggregator": ["FINAL: \\boxed{4}", "no answer"],
    }
    (tmp_path / "replies.json").write_text(json.dumps(script))
    (tmp_path / "two.jsonl").write_text(
        '{"id": "a", "problem": "2+2", "answer": "4"}\n{"id": "b", "problem": "1+3", "answer": "4"}\n'
    )
    args = ["eval", str(ROOT / "workflows" / "math_fixed.srpo"), "--backend", "scripted"]
    args += ["--model", str(tmp_path / "replies.json"), "--data", str(tmp_path / "two.jsonl"), "-k", "2"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "e1")])
    assert result.exit_code == 0, result.output
    (row,) = json.loads((tmp_path / "e1" / "metrics.json").read_text())["datasets"]
    # 4 episodes: 12 solver outputs (4 invalid), 4 verdicts, 4 aggregator outputs (2 invalid)
    assert row["invalid_rate"] == {"solver": 4 / 12, "verifier": 0.0, "aggregator": 0.5}
    assert "| invalid outputs (%) | solver | verifier | aggregator |" in result.output
    assert "| two | 33.3 | 0.0 | 50.0 |" in result.output
