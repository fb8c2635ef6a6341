"""A case's process: started in its own session (so GPU memory and process groups start clean, and the
whole group, workers included, can be stopped), watched until it exits, finishes, or must stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpubench.budget import Clock
from gpubench.records import ROOT

POLL_S = 0.5  # how often a running case is looked at (its new steps, the budget, a signal)
GRACE_S = 2.0  # after SIGTERM, before SIGKILL (a `timeout -k 5` leaves the bench 5 s to write its rows)
LOG_TAIL = 30  # lines of a case's own log repeated on the bench's stderr once it ends


@dataclass
class Outcome:
    status: str  # done, failed or stopped
    note: str | None = None  # failed: its log's last line; stopped: why


def run_child(
    argv: list[str],
    log: Path,
    clock: Clock,
    tick: Callable[[], None] = lambda: None,
    finished: Callable[[], bool] = lambda: False,
    own_stdout: bool = False,
) -> Outcome:
    """Run `argv` from the project root, its stderr into `log` (and its stdout with `own_stdout`; else its
    stdout is the bench's: a case that prints its own rows), calling `tick` every POLL_S s and once more
    at the end. It is done when it exits 0 or `finished()` (then it is stopped: what it does after is not
    measured), failed when it exits otherwise, and stopped when the clock says so."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out if own_stdout else None, stderr=out,
                                start_new_session=True)  # fmt: skip
        try:
            outcome = watch(proc, clock, tick, finished)
        finally:
            stop(proc)
    tick()
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    sys.stderr.write("".join(f"  {x}\n" for x in lines[-LOG_TAIL:]))
    if outcome is None and proc.returncode != 0:
        last = lines[-1].strip()[:160] if lines else ""
        return Outcome("failed", f"exit {proc.returncode}" + (f", {last}" if last else ""))
    return outcome or Outcome("done")


def watch(proc: subprocess.Popen, clock: Clock, tick: Callable[[], None], finished: Callable[[], bool]):
    """None once `proc` exits by itself; else the outcome it was stopped with."""
    while proc.poll() is None:
        tick()
        if finished():
            return Outcome("done")
        if (why := clock.stop_reason()) is not None:
            return Outcome("stopped", why)
        time.sleep(POLL_S)
    return None


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's group (what is left of it after an exit too), SIGKILL after GRACE_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            continue
    proc.wait()
