"""bench/paper_cost.py: a cell's expected GPU time is the documented throughput model, by hand."""

from __future__ import annotations

import subprocess
import sys

import pytest

from srpo_dsl.sweep.experiment import load_experiment
from tests.support import clitools
from tests.support.clitools import ROOT


def test_single_agent_cell_by_hand():
    bench = clitools.load_bench("paper_cost")
    exp = load_experiment(ROOT / "experiments" / "paper_math.toml")
    tp = bench.Throughput(rollout_tps=8000, update_tps=20000, params=1e9, prompt_tokens=400, fill=0.5)
    got = bench.cell_cost(exp, exp.cell("single-grpo"), tp, {"Qwen/Qwen3-4B": 4e9})
    episodes = 32 * 8  # the recipe's batch x group
    response = episodes * 2048 * 0.5  # one call of at most 2,048 tokens, half used
    update = response + episodes * 1 * 400
    step_s = response / 2000 + update / 5000  # both rates / 4 at 4B
    assert got.episode_tokens == 2048 and got.policies == 1
    assert got.step_s == pytest.approx(step_s)
    assert got.train_h == pytest.approx(step_s * 200 / 3600)
    questions = 30 + 30 + 40 + 500 + 272 + 500  # the six benchmarks, capped at [eval] size = 500
    evals = 200 // 50 + 1
    assert got.eval_h == pytest.approx(evals * questions * 16 * 2048 * 0.5 / 2000 / 3600)


def test_team_cells_cost_their_token_bound_and_the_command_prints_both_recipes():
    bench = clitools.load_bench("paper_cost")
    exp = load_experiment(ROOT / "experiments" / "paper_math.toml")
    tp = bench.Throughput(8000, 20000, 1e9, 400, 1.0)
    team = bench.cell_cost(exp, exp.cell("nonsharing-grpo"), tp, bench.PARAMS)
    assert team.policies == 4 and team.episode_tokens == 4 * (256 + 3 * 2048 + 1024) + 2048
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "paper_cost.py"), "--fill", "1"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (
        "paper_math.toml: 3 seeds" in done.stdout
        and "| routed | Qwen/Qwen2.5-3B-Instruct | 1 |" in done.stdout
    )


def test_a_bad_model_size_is_one_line():
    cmd = [sys.executable, str(ROOT / "bench" / "paper_cost.py"), "--params", "Qwen/Qwen3-4B"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.strip() == (
        "--params Qwen/Qwen3-4B: expected NAME=COUNT, e.g. Qwen/Qwen3-4B=4.02e9"
    )
