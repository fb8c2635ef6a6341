"""bench/gpu_bench.py: its CPU mode runs end to end (what CI can run of it), and its derived figures
(update tokens/s, MFU, rollout tokens/s) are the arithmetic its docstring states."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from tests import clitools
from tests.clitools import ROOT
from tests.test_training import _env

SCRIPT = ROOT / "bench" / "gpu_bench.py"


def load_bench():
    return clitools.load_bench("gpu_bench")


def test_update_row_is_the_stated_arithmetic():
    bench = load_bench()
    run = {  # two steps; the first (warm-up) is left out of every median
        "rows": [10, 10],
        "tokens": [100.0, 100.0],  # response tokens per step
        "step_times": [9.0, 2.0],
        "update_times": [5.0, 0.5],
        "peak_gib": 3.25,
    }
    row = bench.update_row("x", run, prompt_tokens=5.0, params=10**9, peak=1e15)
    # update tokens: 10 rows x 5 prompt tokens + 100 = 150 per step; 150 / 0.5 s = 300 tokens/s
    # MFU: 6 x 1e9 x 300 / 1e15 = 0.18%; rollout: 100 tokens / (2.0 - 0.5) s = 67 tokens/s
    assert row == "| x | 2000 | 500 | 300 | 0.2% | 67 | 3.2 |"


@pytest.mark.slow
def test_cpu_mode_runs_and_reports_both_generators_and_stages(tmp_path):
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--parts", "rollout,update", "--repeats", "1", "--json", out],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),  # not this process's rendezvous variables (its own group would be joined)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())["results"]["tiny"]
    rollout = result["rollout"]
    assert rollout["rows"] == 4 * 2  # prompts x group
    for generator in ("hf_dynamic", "hf_static", "hf_compiled", "generate", "generate_static"):
        assert "error" not in rollout[generator], rollout[generator]
        assert 0 < rollout[generator]["tokens"] <= 8 * 8 and rollout[generator]["tokens_per_s"] > 0
    assert rollout["hf_dynamic"]["tokens"] == rollout["hf_static"]["tokens"] == 8 * 8  # random: no row ends
    for stage in ("zero0", "zero3"):
        run = result[stage]
        assert "error" not in run, run
        assert len(run["step_times"]) == 2 and all(
            0 < u < s for u, s in zip(run["update_times"], run["step_times"])
        )
    assert "| srpo-dsl hf engine, decode compiled |" in done.stdout and "| srpo-dsl ZeRO-3 |" in done.stdout


def test_async_report_is_each_cells_rate_against_sync():
    bench = load_bench()
    result = {
        "sync": {"steps_per_s": 0.5, "staleness": 0.0},
        "async S=1": {"steps_per_s": 0.75, "staleness": 1.0},
        "async S=2": {"error": "out of GPU memory"},
    }
    lines = bench.async_report(result)
    assert lines[2:5] == [
        "| sync | 0.500 | 1.00× | 0.00 |",
        "| async S=1 | 0.750 | 1.50× | 1.00 |",  # 0.75 / 0.5
        "| async S=2 | failed: out of GPU memory | | |",
    ]
    assert set(bench.ASYNC_CELLS) == set(result) and bench.ASYNC_CELLS["async S=2"]["max_staleness"] == 2


def test_options_reach_every_trained_part_and_a_budget_replaces_the_count():
    bench = load_bench()
    assert bench.micro_batching({"team_micro_batches": 8, "options": {}}) == {"micro_batches": 8}
    budget = {"max_tokens_per_micro_batch": "16384", "pack_rows": "true"}
    assert bench.micro_batching({"team_micro_batches": 8, "options": budget}) == budget


def test_a_spent_time_budget_skips_the_cases_and_still_reports(tmp_path):
    """`--budget-s 0`: no case starts (not even a model build), each is reported as skipped, exit 0."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--budget-s", "0", "--json", tmp_path / "gpu.json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "gpu.json").read_text())["results"]["tiny"]
    assert result["build"] == {"error": "skipped: the --budget-s time budget was spent"}
    assert "build: failed, skipped" in done.stdout


def test_the_lora_shape_trains_adapters_on_a_frozen_base(tmp_path):
    """The 4B shape's workflow declares LoRA on its policy, and checks clean."""
    from srpo_dsl.lang import analyze

    bench = load_bench()
    args = argparse.Namespace(tokens=8, group=2, batch=4)
    path = bench.write_workflow(tmp_path, bench.SOLVER, tmp_path / "model", args, lora="4b" in bench.LORA)
    text = path.read_text()
    assert "lora(r = 16, alpha = 32)" in text
    result = analyze(text, str(path))
    assert result.diagnostics == [] and result.program.policies["lm"].lora["r"] == 16
