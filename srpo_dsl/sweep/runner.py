"""Run an experiment's cells: one `srpo-dsl train` subprocess per (cell, seed), `jobs` at a time.

A finished run is skipped; any other is started with `--resume` (which continues from the run
folder's latest checkpoint, or starts afresh when there is none). A run that fails is recorded
with its exit code and last error line; the others go on. The state is rewritten after every
change, so a killed sweep resumes where it was.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import srpo_dsl.console as console
from srpo_dsl.sweep.experiment import Cell, Experiment
from srpo_dsl.sweep.state import SweepState, finished, log_path, run_dir, run_key
from srpo_dsl.tethered import tethered
from srpo_dsl.trackers.base import EXPERIMENT_ENV, RUN_NAME_ENV

LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Job:
    cell: Cell
    seed: int

    @property
    def key(self) -> str:
        return run_key(self.cell.name, self.seed)


def option_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def train_command(
    exp: Experiment, job: Job, folder: Path, settings: Mapping[str, str] | None = None, procs: int = 1
) -> list[str]:
    """`python -m srpo_dsl train WORKFLOW --out RUN --resume --seed S --option NAME=VALUE ...`, and the
    sweep's `--set` tool options (and `--verbose` under `sweep --verbose`: into each run's log); with
    `procs` > 1 under torchrun (`--standalone`: each run its own rendezvous on a free port), one process
    per GPU."""
    launch = [sys.executable, "-m", "srpo_dsl"]
    if procs > 1:
        launch = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(procs),
        ]
        launch += ["-m", "srpo_dsl"]
    cmd = [*launch, "train", str(job.cell.workflow)]
    cmd += ["--out", str(run_dir(folder, job.cell.name, job.seed)), "--resume", "--seed", str(job.seed)]
    for name, value in {**job.cell.overrides, **exp.evaluation}.items():
        cmd += ["--option", f"{name}={option_value(value)}"]
    for data in exp.datasets:
        cmd += ["--eval-data", str(data)]
    if job.cell.model is not None:
        cmd += ["--model", job.cell.model]
    for key, value in (settings or {}).items():
        cmd += ["--set", f"{key}={value}"]
    return cmd + (["--verbose"] if console.level() == console.VERBOSE else [])  # the libraries' logs


def child_env(jobs: int, devices: list[str] | None = None) -> dict[str, str]:
    """This environment without a launcher's rendezvous variables (a run launches its own); with no
    OMP_NUM_THREADS set, the cores are shared out between the processes of the running jobs
    (oversubscribed torch threads slow every run down several times); `devices`: the run's GPUs
    (CUDA_VISIBLE_DEVICES), when the sweep shares the GPUs out."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    processes = jobs * max(1, len(devices or ()))
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    return env


def tracked_as(exp: Experiment, job: Job) -> dict[str, str]:
    """How the run's trackers name it (`report_to`): in the experiment named after the experiment file
    (unless SRPO_DSL_EXPERIMENT is set), as CELL/seed-S."""
    return {EXPERIMENT_ENV: os.environ.get(EXPERIMENT_ENV) or exp.path.stem, RUN_NAME_ENV: job.key}


def device_slots(jobs: int, procs: int) -> list[list[str]]:
    """The GPUs of each of the `jobs` runs at a time, `procs` each: consecutive slices of
    CUDA_VISIBLE_DEVICES (else devices 0, 1, ...); no slices with one process per run."""
    if procs <= 1:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d.strip() for d in visible.split(",")] if visible else [str(i) for i in range(jobs * procs)]
    if len(devices) < jobs * procs:
        need = f"{jobs} runs at a time of {procs} processes need {jobs * procs} GPUs"
        raise ValueError(f"{need}; CUDA_VISIBLE_DEVICES names {len(devices)}")
    return [devices[i * procs : (i + 1) * procs] for i in range(jobs)]


ERROR_LINE = re.compile(r"(?<![\w-])(internal error.*|error: .*)$")  # where a message starts in a line


def last_error(log: Path) -> str:
    """The run's last `error: ...` message, else its last line. Progress bars' carriage returns split
    lines, and a bar left unfinished puts the message after its last frame on the same line."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "no log"
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    errors = [found.group(1) for line in lines if (found := ERROR_LINE.search(line))]
    return (errors or lines or ["no output"])[-1]


class Sweep:
    """The runs of one experiment in one folder; `on_change` is called after every state change."""

    def __init__(
        self,
        exp: Experiment,
        folder: Path,
        state: SweepState,
        jobs: int,
        settings: Mapping[str, str] | None = None,
        procs: int = 1,
    ):
        self.exp, self.folder, self.state, self.jobs = exp, folder, state, jobs
        self.settings = dict(settings or {})  # `--set` tool options, passed to every run
        self.procs_per_run = procs  # processes (GPUs) per run; > 1: torchrun
        self.slots: queue.SimpleQueue[list[str]] = queue.SimpleQueue()  # free GPU slices, when shared out
        for slot in device_slots(jobs, procs):
            self.slots.put(slot)
        self.lock = threading.Lock()
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopping = False
        self.on_change: Callable[[], None] = lambda: None

    def todo(self) -> list[Job]:
        """The runs still to do, in cell then seed order (failed ones again); finished runs are done."""
        out = []
        for cell in self.exp.cells:
            for seed in self.exp.seeds:
                job = Job(cell, seed)
                done = finished(run_dir(self.folder, cell.name, seed))
                self.state.runs[job.key].status = "done" if done else "pending"
                out += [] if done else [job]
        self.save()
        return out

    def save(self) -> None:
        with self.lock:
            self.state.save(self.folder)
        self.on_change()

    def update(self, job: Job, **changes: object) -> None:
        with self.lock:
            run = self.state.runs[job.key]
            for key, value in changes.items():
                setattr(run, key, value)
            self.state.save(self.folder)
        self.on_change()

    def run_one(self, job: Job) -> None:
        if self.stopping:
            return
        log = log_path(self.folder, job.cell.name, job.seed)
        log.parent.mkdir(parents=True, exist_ok=True)
        run = self.state.runs[job.key]
        self.update(job, status="running", attempts=run.attempts + 1, error=None, exit_code=None)
        start = time.monotonic()
        devices = self.slots.get() if self.procs_per_run > 1 else None
        try:
            code = self.launch(job, log, devices)
        finally:
            if devices is not None:
                self.slots.put(devices)
        wall = run.wall_s + time.monotonic() - start
        if self.stopping:
            self.update(job, status="pending", wall_s=wall)
        elif code == 0 and finished(run_dir(self.folder, job.cell.name, job.seed)):
            self.update(job, status="done", exit_code=0, wall_s=wall)
        else:
            self.update(job, status="failed", exit_code=code, error=last_error(log), wall_s=wall)

    def launch(self, job: Job, log: Path, devices: list[str] | None) -> int:
        """The run's train command to its end, its output appended to `log`; its exit code. It dies with
        the sweep however the sweep ends (`tethered`)."""
        with log.open("a", encoding="utf-8") as out:
            proc = subprocess.Popen(
                tethered(train_command(self.exp, job, self.folder, self.settings, self.procs_per_run)),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env(self.jobs, devices) | tracked_as(self.exp, job),
            )
            self.procs[job.key] = proc
            code = proc.wait()
            self.procs.pop(job.key, None)
        return code

    def run(self, jobs: list[Job]) -> None:
        """Every job, `self.jobs` at a time; on an interrupt (SIGINT, or SIGTERM in the main thread) the
        running ones are stopped and stay resumable."""
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, interrupted) if main else None
        try:
            self.run_all(jobs)
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)

    def run_all(self, jobs: list[Job]) -> None:
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = [pool.submit(self.run_one, job) for job in jobs]
            try:
                for f in futures:
                    while not f.done():
                        time.sleep(0.2)
                    f.result()
            except KeyboardInterrupt:
                self.stopping = True
                for proc in list(self.procs.values()):
                    proc.terminate()
                raise


def interrupted(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as Ctrl-C: the sweep stops its runs and exits (130) instead of orphaning them."""
    raise KeyboardInterrupt


__all__ = ["Job", "Sweep", "train_command"]
