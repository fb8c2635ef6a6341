"""How the sweep runs its runs: `--procs-per-run N` (each run under torchrun with N processes, the GPUs
shared out between the runs at a time as CUDA_VISIBLE_DEVICES slices, the cores between all their
processes), and the error line it records for a run that failed."""

import json
import sys

import pytest

from srpo_dsl.sweep.experiment import load_experiment
from srpo_dsl.sweep.runner import Job, child_env, device_slots, last_error, train_command
from tests.support.clitools import ROOT, cli
from tests.support.training import train_env


def test_a_run_of_several_processes_is_launched_by_torchrun(tmp_path):
    exp = load_experiment(ROOT / "experiments" / "paper_math.toml")
    job = Job(exp.cell("srpo"), 2)
    one = train_command(exp, job, tmp_path)
    many = train_command(exp, job, tmp_path, procs=4)
    assert one[:4] == [sys.executable, "-m", "srpo_dsl", "train"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4"]
    assert many[:9] == [*torchrun, "-m", "srpo_dsl", "train"] and many[9:] == one[4:]


def test_gpus_are_sliced_per_run_and_cores_per_process(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7,9")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert device_slots(2, 2) == [["3", "5"], ["6", "7"]]
    assert device_slots(4, 1) == []  # one process a run: every run sees every device, as before
    with pytest.raises(
        ValueError, match="3 runs at a time of 2 processes need 6 GPUs; CUDA_VISIBLE_DEVICES names 5"
    ):
        device_slots(3, 2)
    env = child_env(2, ["6", "7"])
    assert env["CUDA_VISIBLE_DEVICES"] == "6,7" and env["OMP_NUM_THREADS"] == "4"  # 16 cores / 4 processes
    assert child_env(2)["OMP_NUM_THREADS"] == "8"


def test_too_few_gpus_is_one_line_before_anything_runs(tmp_path):
    env = {**train_env(), "CUDA_VISIBLE_DEVICES": "0,1"}
    out = tmp_path / "s"
    done = cli(
        "sweep", "experiments/toy_paper.toml", "--out", out, "--jobs", "2", "--procs-per-run", "2", env=env
    )
    assert done.returncode != 0 and done.stderr.strip().splitlines() == [
        "error: --jobs 2 --procs-per-run 2: 2 runs at a time of 2 processes need 4 GPUs; CUDA_VISIBLE_DEVICES names 2"
    ]
    assert not out.exists()


@pytest.mark.distributed
@pytest.mark.slow
def test_a_sweep_run_of_two_processes_trains_as_one_data_parallel_run(tmp_path):
    out = tmp_path / "s"
    options = ["--option", "steps=1", "--option", "batch=2", "--option", "group=2"]
    options += ["--option", "eval_k=1", "--option", "eval_size=2"]
    done = cli(
        "sweep",
        "experiments/toy_async.toml",
        "--out",
        out,
        "--seeds",
        "1",
        "--procs-per-run",
        "2",
        *options,
        env={k: v for k, v in train_env().items() if k != "CUDA_VISIBLE_DEVICES"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config = json.loads((out / "cells" / "sync" / "seed-1" / "config.json").read_text())
    assert config["world_size"] == 2  # two ranks, one run: its data split between them
    steps = (out / "cells" / "sync" / "seed-1" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in steps] == [1]


@pytest.mark.parametrize(
    "log, want",
    [
        ("train:  10%|#  | 1/10 [00:01<00:09]error: batch = 5000 prompts\n", "error: batch = 5000 prompts"),
        ("loading\rtrain:   0%|  | 0/10\rerror: no such file\n\n", "error: no such file"),
        (
            "internal error (a bug, please report it): KeyError: 'x'\n",
            "internal error (a bug, please report it): KeyError: 'x'",
        ),
        ("a warning: terror: not one\nlast words\n", "last words"),
        ("", "no output"),
    ],
)
def test_a_failed_run_s_error_is_its_message_not_a_progress_frame(tmp_path, log, want):
    # sweep recorded the bar's frame as the error when the message followed it on one line (issue 38).
    path = tmp_path / "seed-1.log"
    path.write_text(log)
    assert last_error(path) == want
