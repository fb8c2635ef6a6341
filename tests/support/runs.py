"""What the tests of whole training runs share: the quickstart and a small run of it (`SMALL`), a run's
metrics and weights read back and compared (`same_run`), waiting for a running one's steps, the
environment of a run's processes, and targets in spawned processes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.multiprocessing as mp

from srpo_dsl.rl.distributed.process_group import free_port
from srpo_dsl.sweep.runner import LAUNCHER_VARIABLES
from tests.support.clitools import ROOT

QUICKSTART = ROOT / "workflows" / "quickstart.srpo"


SMALL = [
    "--steps",
    "3",
    "--batch",
    "4",
    "--group",
    "4",
    "--option",
    "eval_every=3",
    "--option",
    "eval_size=8",
]


def first_result(targets: list[tuple[Callable[..., None], tuple]]) -> object:
    """Each target(port, queue, *args) in a spawned process sharing one free port; the first thing one of
    them puts in the queue, once all ended."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=target, args=(port, out, *args)) for target, args in targets]
    for p in procs:
        p.start()
    result = out.get(timeout=60)
    for p in procs:
        p.join(timeout=30)
    return result


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    (path,) = (run / "checkpoints" / f"step-{step}").rglob("*model_states.pt")
    return torch.load(path, map_location="cpu", weights_only=False)["module"]


def env_threads(n: int) -> dict[str, str]:
    """This environment with `n` torch threads and without a launcher's variables (an earlier test's
    in-process group sets them; a run with a worker then starts its own launch)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    return env | {"OMP_NUM_THREADS": str(n)}


def wait_for_steps(launcher: subprocess.Popen, out: Path, steps: int) -> None:
    """Until `steps` rows of metrics are written. The deadline is generous: on a loaded 2-core machine
    (other test files' runs beside this one's 3 processes) a step can take tens of seconds."""
    deadline = time.time() + 600
    while not (out / "metrics.jsonl").exists() or len(metrics(out)) < steps:
        assert launcher.poll() is None, "the run ended before the kill"
        assert time.time() < deadline, f"no {steps} steps in 600 s"
        time.sleep(0.05)


COMPARED = ("return", "loss", "grad_norm", "num_events")


def same_run(a: Path, b: Path) -> None:
    """The same metrics at every step and the same checkpointed weights, bit for bit."""
    assert [[r[k] for k in COMPARED] for r in metrics(a)] == [[r[k] for k in COMPARED] for r in metrics(b)]
    first, second = weights(a, 3), weights(b, 3)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
