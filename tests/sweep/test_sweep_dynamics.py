"""A sweep's training dynamics (sweep/dynamics.py) from hand-written metrics.jsonl rows, against
hand-computed values: the rolling coefficient of variation, each run's summary, the results.md table."""

import json
import math

import numpy as np
import pytest

from srpo_dsl.sweep.dynamics import WINDOW, read_run_dynamics, rolling_cv, run_summary
from srpo_dsl.sweep.report import dynamics_md


def test_rolling_cv_is_population_std_over_mean_of_the_last_window():
    got = rolling_cv(np.array([1.0, 3.0, 3.0, 1.0]), window=2)
    # [1]: 0; [1, 3]: std 1 / mean 2; [3, 3]: 0; [3, 1]: 1 / 2
    assert got.tolist() == [0.0, 0.5, 0.0, 0.5]
    assert math.isnan(rolling_cv(np.array([0.0, 0.0]))[1])  # a zero mean has no CV


def write_run(folder, norms, returns, clips):
    folder.mkdir(parents=True)
    rows = [
        {
            "step": i + 1,
            "return": r,
            "grad_norm": g,
            "response_length": 4.0,
            "mean_set_size": 2.5,
            "event/parallel:solver/clip_fraction": c,
            "event/verify:verifier/clip_fraction": 0.0,
            "role/solver/clip_fraction": 9.9,  # per role: not an event type
        }
        for i, (g, r, c) in enumerate(zip(norms, returns, clips))
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_runs_summary_and_the_cells_table(tmp_path):
    n = WINDOW + 2
    returns = [0.0, 0.0] + [0.5] * WINDOW  # the last WINDOW steps: 0.5
    write_run(tmp_path / "one", [1.0, 3.0] * (n // 2), returns, [0.1] * n)
    write_run(tmp_path / "two", [2.0] * n, [1.0] * n, [0.3] * n)
    one, two = read_run_dynamics(tmp_path / "one", 1), read_run_dynamics(tmp_path / "two", 2)
    assert sorted(one.series) == [
        "clip/parallel:solver",
        "clip/verify:verifier",
        "grad_norm",
        "grad_norm_cv",
        "mean_set_size",
        "response_length",
        "return",
    ]
    s = run_summary(one)
    assert s["return"] == 0.5 and s["grad_norm"] == 2.0 and s["grad_norm_cv"] == 0.5
    assert s["clip/parallel:solver"] == pytest.approx(0.1) and s["mean_set_size"] == 2.5
    assert run_summary(two)["grad_norm_cv"] == 0.0
    table = dynamics_md({"cell": [one, two], "empty": []})
    row = next(line for line in table.splitlines() if line.startswith("| cell |") and "seeds" not in line)
    # return (0.5, 1.0): 0.75 ± 0.354; norm 2 ± 0; CV (0.5, 0): 0.25 ± 0.354; clip: (10 + 30) / 2 = 20.0 %
    assert row == (
        "| cell | 2 | 0.750 ± 0.354 | 2.000 ± 0.000 | 0.250 ± 0.354 | 4.0 ± 0.0 | 2.50 ± 0.00 "
        "| parallel:solver 20.0, verify:verifier 0.0 |"
    )
    assert "| empty |" not in table
