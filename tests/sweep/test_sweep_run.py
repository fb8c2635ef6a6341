"""`srpo-dsl sweep` end to end on the embedded model: identical cells give identical metrics, a failing
cell is recorded while the others finish, a killed run resumes to the same metrics, `--report` rebuilds."""

import json
from pathlib import Path

import pytest

from srpo_dsl.io import write_lines_atomic
from srpo_dsl.runfolder import read_jsonl
from tests.support.clitools import ROOT, cli
from tests.support.training import train_env

EXPERIMENT = f"""seeds = [3]
baseline = "a"
[eval]
k = 2
size = 8
every = 1
[train]
steps = 2
batch = 4
group = 2
save_every = 1
[[cell]]
name = "a"
workflow = "{ROOT / "workflows" / "toy_k4.srpo"}"
[[cell]]
name = "b"
workflow = "{ROOT / "workflows" / "toy_k4.srpo"}"
[[cell]]
name = "c"
workflow = "{ROOT / "workflows" / "toy_k4.srpo"}"
batch = 5000
"""


def rows(run: Path, name: str) -> list[dict]:
    """A run file's rows without wall-clock times (the only thing two identical runs may differ in)."""
    return [{k: v for k, v in r.items() if not k.startswith("time")} for r in read_jsonl(run / name)]


def same_run(one: Path, other: Path) -> None:
    for name in ("metrics.jsonl", "eval.jsonl", "eval_prompts.jsonl"):
        assert rows(one, name) == rows(other, name), name


def kill_after_first_step(run: Path) -> None:
    """What SIGKILL during step 2 leaves: step 1's checkpoint and rows, no step 2."""
    import shutil

    shutil.rmtree(run / "checkpoints" / "step-2")
    for name in ("metrics.jsonl", "eval.jsonl", "eval_prompts.jsonl"):
        kept = [r for r in read_jsonl(run / name) if r["step"] <= 1]
        write_lines_atomic(run / name, [json.dumps(r) + "\n" for r in kept])


@pytest.mark.slow
def test_sweep_runs_resumes_and_reports(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    out = tmp_path / "sweep"
    first = cli("sweep", exp, "--out", out, "--jobs", "2", env=train_env(), timeout=600)
    assert first.returncode == 1, first.stderr[-2000:]  # cell c failed, a and b finished
    assert "3 runs: 0 pending, 0 running, 2 done, 1 failed" in first.stdout
    state = json.loads((out / "sweep.json").read_text())
    failed = state["runs"]["c/seed-3"]
    assert failed["status"] == "failed" and failed["exit_code"] == 2
    assert failed["error"] == "error: batch = 5000 prompts per step but the task has only 2000"
    a, b = out / "cells" / "a" / "seed-3", out / "cells" / "b" / "seed-3"
    same_run(a, b)  # the same cell and seed give the same metrics
    for row, prompts in zip(read_jsonl(a / "eval.jsonl"), read_jsonl(a / "eval_prompts.jsonl")):
        correct = prompts["datasets"]["heldout"]["correct"]
        assert row["avg_at_k"] == pytest.approx(sum(correct) / (2 * len(correct))) and len(correct) == 8
    results = json.loads((out / "results.json").read_text())
    b_cell = next(c for c in results["cells"] if c["name"] == "b")
    assert b_cell["versus_baseline"]["final_avg"] == {
        "mean": 0.0,
        "low": 0.0,
        "high": 0.0,
        "n_seeds": 1,
        "n_prompts": 8,
    }
    assert b_cell["final_avg"]["values"] == [100 * read_jsonl(b / "eval.jsonl")[-1]["avg_at_k"]]
    assert "- `c` seed 3: exit 2: error: batch = 5000" in (out / "results.md").read_text()

    reference = tmp_path / "reference"
    reference.mkdir()
    for name in ("metrics.jsonl", "eval.jsonl", "eval_prompts.jsonl"):
        (reference / name).write_text((a / name).read_text())
    kill_after_first_step(a)
    state["runs"]["a/seed-3"]["status"] = "running"  # as a killed sweep leaves it
    (out / "sweep.json").write_text(json.dumps(state))
    again = cli("sweep", exp, "--out", out, "--jobs", "2", env=train_env(), timeout=600)
    assert again.returncode == 1, again.stderr[-2000:]
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert [runs[f"{c}/seed-3"]["attempts"] for c in "abc"] == [2, 1, 2]  # b was finished: skipped
    same_run(a, reference)  # resumed from step 1's checkpoint to the uninterrupted run's metrics

    before = (out / "results.json").read_text()
    (out / "results.json").unlink()
    rebuilt = cli("sweep", "--report", out, env=train_env())
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (out / "results.json").read_text() == before
    assert (out / "curves.png").stat().st_size > 10_000
    assert (out / "dynamics.png").stat().st_size > 10_000
    dynamics = (out / "results.md").read_text().split("## Training dynamics")[1].splitlines()
    a_row, b_row = (next(line for line in dynamics if line.startswith(f"| {c} | 1 |")) for c in "ab")
    assert a_row[len("| a |") :] == b_row[len("| b |") :]  # identical runs, identical dynamics
    assert "parallel:solver 0.0" in a_row  # one epoch: nothing clipped


@pytest.mark.slow
def test_train_evaluates_each_eval_data_file_and_their_macro_mean(tmp_path):
    from srpo_dsl.envs.arith import make_arith_tasks

    files = []
    for name, n in (("small", 3), ("large", 5)):
        files.append(tmp_path / f"{name}.jsonl")
        tasks = make_arith_tasks(n, 7, 99, heldout=True)
        files[-1].write_text(
            "".join(
                json.dumps({"id": t["id"], "question": t["question"], "answer": t["answer"]}) + "\n"
                for t in tasks
            )
        )
    out = tmp_path / "run"
    args = ["--steps", "1", "--batch", "2", "--group", "2", "--option", "eval_k=2"]
    result = cli(
        "train",
        "workflows/quickstart.srpo",
        "--out",
        out,
        *args,
        "--eval-data",
        files[0],
        "--eval-data",
        files[1],
        env=train_env(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for row, prompts in zip(read_jsonl(out / "eval.jsonl"), read_jsonl(out / "eval_prompts.jsonl")):
        assert list(row["datasets"]) == ["small", "large"] and row["n_prompts"] == 8
        for name, n in (("small", 3), ("large", 5)):
            correct = prompts["datasets"][name]["correct"]
            assert len(correct) == n and row["datasets"][name]["avg_at_k"] == pytest.approx(
                sum(correct) / (2 * n)
            )
        assert row["avg_at_k"] == pytest.approx(
            (row["datasets"]["small"]["avg_at_k"] + row["datasets"]["large"]["avg_at_k"]) / 2
        )
    assert json.loads((out / "config.json").read_text())["eval_data"] == [str(f) for f in files]
