"""A run folder written before `score` and `accuracy` became `return` and `task_score` still reads in
`plot`, `view` and `sweep`.

tests/data/old_run is such a run, as that version wrote it (checkpoints and tb/ left out; the model
path in config.json made relative): `srpo-dsl train workflows/quickstart.srpo --steps 3 --batch 3
--group 2 --seed 1 --option eval_size=3 --option eval_k=2 --option eval_every=1 --option save_every=3
--device cpu`. Its steps 1 and 2 had an invalid output, so there `score` (the return) < `accuracy`.
"""

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from srpo_dsl.runfolder import current_keys, read_jsonl
from tests.support.clitools import cli
from tests.support.training import train_env

OLD = Path(__file__).parents[1] / "data" / "old_run"


def old(name: str) -> list[dict]:
    return read_jsonl(OLD / name)


def test_the_fixture_is_an_old_run_whose_return_and_task_score_differ() -> None:
    rows = old("metrics.jsonl")
    assert all("score" in r and "accuracy" in r and "return" not in r for r in rows)
    assert rows[0]["score"] < rows[0]["accuracy"]


def test_current_keys_renames_the_old_keys_only() -> None:
    row = {"step": 1, "score": 0.3, "accuracy": 1 / 3, "loss": 0.0, "role/solver/invalid_rate": 0.25}
    assert current_keys(row) == {
        "step": 1,
        "return": 0.3,
        "task_score": 1 / 3,
        "loss": 0.0,
        "role/solver/invalid_rate": 0.25,
    }
    new = {"step": 2, "return": -0.1, "task_score": 0.0}
    assert current_keys(new) == new


def test_plot_draws_an_old_run(tmp_path: Path) -> None:
    from srpo_dsl.cli.main import app
    from srpo_dsl.runfolder import read_dynamics

    dynamics = read_dynamics(OLD)
    assert dynamics.steps == [1, 2, 3]
    assert dynamics.series["return"] == [r["score"] for r in old("metrics.jsonl")]
    assert dynamics.curve is not None and dynamics.curve.avg == [
        100 * r["avg_at_k"] for r in old("eval.jsonl")
    ]
    result = CliRunner().invoke(app, ["plot", str(OLD), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in tmp_path.iterdir()} == {
        "return.png",
        "grad_norm.png",
        "response_length.png",
        "mean_set_size.png",
        "role_invalid_rate.png",
        "role_response_length.png",
        "role_abs_advantage.png",
        "role_clip_fraction.png",
        "heldout.png",
        "training_dynamics.png",
    }


def test_view_shows_an_old_runs_return_and_task_score(tmp_path: Path) -> None:
    done = cli("view", OLD, "-o", tmp_path / "page.html", env=train_env())
    assert done.returncode == 0 and done.stderr == "", done.stderr
    html = (tmp_path / "page.html").read_text()
    chart = next(c for c in re.findall(r'<svg class="chart".*?</svg>', html, re.S) if "Return (mean" in c)
    assert ">return</text>" in chart and ">task score</text>" in chart  # the legend: both lines drawn
    found = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S)
    assert found is not None
    episodes = json.loads(found.group(1))["episodes"]
    traces = old("traces.jsonl")
    assert [(e["return"], e["taskScore"]) for e in episodes] == [(t["reward"], t["score"]) for t in traces]


def test_sweep_reports_on_old_runs(tmp_path: Path) -> None:
    from srpo_dsl.sweep.report import write_report

    cells = ("a", "b")  # the same old run twice: b against the baseline a differs by 0

    plan = {
        "experiment": "exp.toml",
        "seeds": [1],
        "baseline": "a",
        "evaluation": {"k": 2, "size": 3, "every": 1},
        "datasets": [],
        "cells": [{"name": c, "workflow": "workflows/quickstart.srpo", "overrides": {}} for c in cells],
    }
    done = {"status": "done", "exit_code": 0, "error": None, "wall_s": 60.0, "attempts": 1}
    runs = {f"{c}/seed-1": done for c in cells}
    (tmp_path / "sweep.json").write_text(json.dumps({"format": "srpo-sweep/1", **plan, "runs": runs}))
    for c in cells:
        shutil.copytree(OLD, tmp_path / "cells" / c / "seed-1")
    write_report(tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    last = old("eval.jsonl")[-1]
    for cell in results["cells"]:
        assert cell["final_avg"]["values"] == [100 * last["avg_at_k"]]
        assert cell["best_pass"]["values"] == [100 * max(r["pass_at_k"] for r in old("eval.jsonl"))]
        assert cell["tokens_per_episode"]["values"] == [last["tokens_per_episode"]]
        assert cell["calls_per_episode"]["values"] == [last["calls_per_episode"]]
    versus = results["cells"][1]["versus_baseline"]["final_avg"]
    assert (versus["mean"], versus["n_prompts"]) == (0.0, 3)
