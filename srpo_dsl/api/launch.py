"""Training with rollout workers and no launcher: `srpo-dsl train` as 1 + R processes.

With `rollout_workers = R` a run is 1 + R processes (one trainer rank, R workers, `rl/transport/link.py`):
`TrainPlan.processes`. Started without `torchrun` or `deepspeed`, the command (or the API's
`Workflow.train`) writes its plan into the run folder (`rl.loop.plan_io`) and starts each of them as
`srpo-dsl launched OUT`, which carries that plan out (nothing parsed, compiled or planned again), with
the variables a launcher sets (RANK,
WORLD_SIZE, MASTER_ADDR, ...; rank 0 hosts the rendezvous store), and returns the trainer's code.
Not torch's elastic launcher: that stops every process when one fails, and here a worker that dies
must not stop the run, once every process joined the launch (`launched.mark_joined`); one that ends
before that stops it (the others would wait for it at the rendezvous for half an hour). The threads of
this machine are shared out between the processes.
`launch` starts a plan's processes this way, or as Ray actors with `--launcher ray` (`api.ray_launch`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from srpo_dsl.rl.loop.plan import TrainPlan

from srpo_dsl.api.relay import Outputs
from srpo_dsl.console import quiet
from srpo_dsl.launched import (
    ENDED,
    FORWARDED,
    JOINED,
    LAUNCHER,
    ended_before_joining,
    ended_unsaid,
    joined_count,
)
from srpo_dsl.rl.loop.plan_io import planned
from srpo_dsl.runlock import owning

POLL = 0.1  # seconds between looks at the processes
LAUNCHED = "launched"  # the (hidden) command each process of a launch runs: `srpo-dsl launched OUT`


def launch(
    plan: TrainPlan, outputs: Outputs = Outputs(), *, verbose: bool = False, dry_run: bool = False
) -> int:
    """Start the plan's processes, each carrying out the plan this one wrote into the run folder
    (`rl.loop.plan_io`, `srpo-dsl launched OUT`, at this process's --verbose or --quiet): as Ray actors
    (`--launcher ray`, `api.ray_launch`), else on this machine (`relaunch`); trainer rank 0's exit code."""
    if plan.setup.ray is not None:
        from srpo_dsl.api.ray_launch import run_on_ray

        with planned(plan):  # rank 0 owns the run folder, on its node
            return run_on_ray(plan, launched_argv(plan.out, verbose, dry_run), outputs)
    with owning(plan.out), tempfile.TemporaryDirectory(prefix="srpo-dsl-launch-") as joined:
        with planned(plan):
            code = relaunch(plan.processes, launched_argv(plan.out, verbose, dry_run), Path(joined), outputs)
        if code < 0 or Path(joined, ENDED).exists():  # a signal's end, or one through Python
            return code if code >= 0 else 128 - code
    line = ended_unsaid(f"the run stopped at {stopped_at(plan.out, plan.opts.steps)}", code)
    print(line, file=outputs.stderr or sys.stderr, flush=True)
    return 1


def launched_argv(out: Path, verbose: bool, dry_run: bool) -> list[str]:
    """`srpo-dsl`'s arguments for each process of a launch: the run folder whose plan it carries out, and
    how much it says."""
    level = ["--verbose"] if verbose else ["--quiet"] if quiet() else []
    return [LAUNCHED, str(out), *(["--dry-run"] if dry_run else []), *level]


def stopped_at(out: Path, steps: int) -> str:
    """`step S of STEPS`: the last step the run in `out` recorded (0: none)."""
    from srpo_dsl.runfolder import METRICS, as_int, read_jsonl

    try:
        done = [as_int(row["step"]) for row in read_jsonl(out / METRICS)]
    except (OSError, ValueError, KeyError, TypeError, OverflowError):
        done = []
    return f"step {max(done, default=0)} of {steps}"


def relaunch(processes: int, argv: Sequence[str], joined: Path, outputs: Outputs = Outputs()) -> int:
    """Run `srpo-dsl ARGV` as `processes` processes on this machine: rank 0 trains, the others are rollout
    workers, each marking in `joined` when it joined the launch. Rank 0's exit code (negative: the signal
    that ended it): a worker that stops does not stop the run (the trainer hands its steps to the others,
    or stops with one line when none is left); once the trainer is done, so are they. A process that ends
    before all joined ends the launch."""
    from srpo_dsl.rl.distributed.process_group import free_port

    cores = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    variables = {  # they die with this process (LAUNCHER), and write under its lock of the run folder
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(processes),
        "LOCAL_WORLD_SIZE": str(processes),
        "OMP_NUM_THREADS": str(max(1, cores // processes)),
        LAUNCHER: str(os.getpid()),
        JOINED: str(joined),
    }
    env = os.environ | outputs.env() | variables
    command = [sys.executable, "-m", "srpo_dsl", *argv]
    ranks = [  # a session of their own: a Ctrl-C reaches them once, forwarded by this process
        subprocess.Popen(
            command,
            env=env | {"RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=outputs.stdout,
            stderr=outputs.stderr,
            start_new_session=True,
        )
        for r in range(processes)
    ]

    def forwarded(number: int, _: FrameType | None) -> None:
        for process in ranks:
            process.send_signal(number)

    forward = {sig: signal.signal(sig, forwarded) for sig in FORWARDED}
    try:
        code = launch_code(ranks, joined, outputs.stderr)
        for process in ranks:
            if code != 0 and process.poll() is None:  # the process that ended said why: no more lines
                process.terminate()
            stop(process)
    finally:
        for sig, handler in forward.items():
            signal.signal(sig, handler)
    return code


def launch_code(ranks: Sequence[subprocess.Popen], joined: Path, stderr: IO[str] | None) -> int:
    """Rank 0's exit code, once it ends; before every process marked that it joined, the code of the first
    to end (one line when a signal ended it: nothing else says why)."""
    while (code := ranks[0].poll()) is None:
        ended = [(r, p.returncode) for r, p in enumerate(ranks) if p.poll() is not None]
        if ended and joined_count(joined) < len(ranks):
            rank, code = ended[0]
            if code < 0:
                line = ended_before_joining(rank, 1, signal.Signals(-code).name)
                print(line, file=stderr or sys.stderr, flush=True)
            return code or 1
        time.sleep(POLL)
    return code


def stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """Wait for `process` to end (a worker stops once the trainer has stopped), then terminate it."""
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
