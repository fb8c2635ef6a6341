"""Training is bitwise reproducible for a seed and a thread count (docs/training.md, "Reproducibility"),
through the command line, with two torch threads.

The run: the quickstart with one prompt per step. Its two solvers' rows share that prompt and lie in
both halves of the step's rows, so the two threads both add into that prompt's gradient (the backward
of `response_logprobs`' row indexing, `rl/loop/determinism.py`). Without deterministic kernels two such
runs parted at step 3; the full quickstart first met the case at step 39.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from srpo_dsl.sweep.runner import LAUNCHER_VARIABLES
from tests.support.clitools import ROOT

STEPS, SAVE_EVERY = 8, 4  # runs without deterministic kernels parted at step 3
TRAIN = [
    "train",
    "workflows/quickstart.srpo",
    "--batch",
    "1",
    "--steps",
    str(STEPS),
    "--option",
    "eval_size=16",
]


ASYNC = [  # a worker one version behind, each batch with its step's version (newest: the timing decides)
    "--option",
    "rollout_workers=1",
    "--option",
    "max_staleness=1",
    "--option",
    "rollout_weights=scheduled",
]


def train_cmd(out: Path, save_every: int, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "srpo_dsl",
        *TRAIN,
        "--option",
        f"save_every={save_every}",
        "--out",
        str(out),
        *flags,
    ]


def two_threads() -> dict[str, str]:
    """Two torch threads (asynchronous: one each for the trainer and its worker), no launcher's variables."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    return env | {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


def train(out: Path, save_every: int, *flags: str) -> None:
    done = subprocess.run(
        train_cmd(out, save_every, *flags),
        cwd=ROOT,
        env=two_threads(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def outcome(run: Path, name: str) -> list[dict]:
    """The rows of metrics.jsonl or eval.jsonl without the wall-clock times."""
    rows = [json.loads(line) for line in (run / name).read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time")} for row in rows]


def final_state(run: Path) -> dict:
    """The last checkpoint's weights and optimizer state."""
    state = torch.load(
        run / "checkpoints" / f"step-{STEPS}" / "lm" / "state" / "mp_rank_00_model_states.pt",
        weights_only=False,
    )
    return {"module": state["module"], "optimizer": state["optimizer"]["state"]}


def assert_same_run(a: Path, b: Path) -> None:
    assert outcome(a, "metrics.jsonl") == outcome(b, "metrics.jsonl")  # to the last bit
    assert outcome(a, "eval.jsonl") == outcome(b, "eval.jsonl")
    x, y = final_state(a), final_state(b)
    assert x["module"].keys() == y["module"].keys()
    assert all(torch.equal(x["module"][k], y["module"][k]) for k in x["module"])
    for p in x["optimizer"]:
        assert all(torch.equal(x["optimizer"][p][k], y["optimizer"][p][k]) for k in ("exp_avg", "exp_avg_sq"))


def uninterrupted(out: Path, *flags: str) -> Path:
    """A run checkpointed at steps 4 and 8."""
    train(out, SAVE_EVERY, *flags)
    metrics = outcome(out, "metrics.jsonl")
    assert [r["step"] for r in metrics] == list(range(1, STEPS + 1))
    assert len({r["grad_norm"] for r in metrics}) == STEPS  # it trains: every step moved the weights
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return uninterrupted(tmp_path_factory.mktemp("repro") / "reference")


def kill_after_checkpoint(cut: Path, trainer: Callable[[subprocess.Popen], int], *flags: str) -> None:
    """Start a run in `cut`, SIGKILL its trainer's process once step 4's checkpoint exists."""
    child = subprocess.Popen(
        train_cmd(cut, SAVE_EVERY, *flags),
        cwd=ROOT,
        env=two_threads(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 600
    while not (cut / "checkpoints" / f"step-{SAVE_EVERY}").exists() and child.poll() is None:
        assert time.time() < deadline, f"no checkpoint at step {SAVE_EVERY}"
        time.sleep(0.05)
    os.kill(trainer(child), signal.SIGKILL)
    child.wait()


@pytest.mark.slow
def test_two_runs_are_identical_whatever_their_checkpoints(reference: Path, tmp_path: Path) -> None:
    """Same seed, same threads: the same metrics, held-out results, weights and optimizer state, although
    this run writes its checkpoints (and traces) at other steps than the reference."""
    again = tmp_path / "again"
    train(again, STEPS)
    assert_same_run(reference, again)


@pytest.mark.slow
def test_a_run_killed_after_a_checkpoint_resumes_to_the_same_end(reference: Path, tmp_path: Path) -> None:
    """SIGKILL once step 4's checkpoint exists (the run is into step 5 or later), then `--resume`."""
    cut = tmp_path / "cut"
    kill_after_checkpoint(cut, lambda child: child.pid)
    train(cut, SAVE_EVERY, "--resume")
    assert_same_run(reference, cut)


def rank_zero(launcher: subprocess.Popen) -> int:
    """The trainer's process of a run that launched itself with a rollout worker."""
    import psutil

    return next(
        p.pid for p in psutil.Process(launcher.pid).children(recursive=True) if p.environ().get("RANK") == "0"
    )


@pytest.mark.slow
def test_an_asynchronous_run_killed_after_a_checkpoint_resumes_to_the_same_end(tmp_path: Path) -> None:
    """With a rollout worker one version behind and `rollout_weights = scheduled`: each batch's version is
    fixed by its step, so two runs are identical; SIGKILL of the trainer after step 4's checkpoint (which holds
    step 5's batch, generated with version 3), then `--resume`, ends as the uninterrupted run."""
    reference = uninterrupted(tmp_path / "reference", *ASYNC)
    staleness = [r["async/staleness_max"] for r in outcome(reference, "metrics.jsonl")]
    assert staleness == [0.0] + [1.0] * (STEPS - 1)
    cut = tmp_path / "cut"
    kill_after_checkpoint(cut, rank_zero, *ASYNC)
    train(cut, SAVE_EVERY, "--resume", *ASYNC)
    assert_same_run(reference, cut)
