"""Ctrl-C during `train`: one line saying where `--resume` continues from, once, and exit 130; in one
process, and in the 1 + R processes a run with rollout workers starts without a launcher. SIGTERM and
SIGHUP do the same, exit 143 and 129."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from subprocess import PIPE

import pytest

from srpo_dsl.cli import main as cli_main
from srpo_dsl.runfolder import LOCK
from srpo_dsl.stopping import STOPS, stopped_by, stopping_on_signals
from tests.support.clitools import ROOT

# steps enough that the signal always lands mid-run (40 steps took 8 s: a loaded machine missed them)
SMALL = ["--steps", "10000", "--batch", "4", "--group", "2", "--option", "eval_every=100000"]
SMALL += ["--option", "eval_size=4", "--option", "save_every=1"]


def default_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def interrupted_train(out: Path, *extra: str, sig: int = signal.SIGINT) -> subprocess.CompletedProcess:
    """`srpo-dsl train` (stderr to a pipe), sent `sig` (SIGINT: Ctrl-C) once its first checkpoint is
    written."""
    command = [sys.executable, "-m", "srpo_dsl", "train", "workflows/quickstart.srpo", "--out", str(out)]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(  # SIGHUP as in a terminal's shell: under `nohup` (a CI's) it is ignored, and stays so
        [*command, *SMALL, *extra], cwd=ROOT, env=env, stdout=PIPE, stderr=PIPE, preexec_fn=default_sighup
    )
    began = time.monotonic()
    while not (out / "checkpoints" / "step-1").is_dir() and proc.poll() is None:
        assert time.monotonic() - began < 300, "no checkpoint in 300 s"
        time.sleep(0.1)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)  # bytes: text mode would turn each `\r` into a newline
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout.decode(), stderr.decode())


def resume_line(out: Path, how: str = "interrupted") -> str:
    last = max((out / "checkpoints").glob("step-*"), key=lambda p: int(p.name[5:]))
    return f"{how}: the last checkpoint is {last}; run the same command with --resume to continue from it"


@pytest.mark.slow
def test_sighup_says_where_to_resume_and_removes_the_lock(tmp_path: Path) -> None:
    """A closed terminal (SIGHUP, which the command passes on to its watched child) stops `train` as
    Ctrl-C does: the line, the run folder's lock removed, exit 129 (SIGTERM takes the same path, 143:
    `test_sigterm_stops_as_ctrl_c_does`)."""
    out = tmp_path / "q"
    r = interrupted_train(out, sig=signal.SIGHUP)
    assert r.returncode == 129, r.stderr
    assert r.stderr.splitlines()[-1] == resume_line(out, "stopped by SIGHUP")
    assert not (out / LOCK).exists()


def test_sigterm_stops_as_ctrl_c_does() -> None:
    """SIGTERM (`kill`, a batch system's time limit) raises where the process is, as Ctrl-C does, and is
    said as `stopped by SIGTERM`, exit 143; outside `train`'s block, the handler there was is back."""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as caught, stopping_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    STOPS.clear()
    assert stopped_by(caught.value) == ("stopped by SIGTERM", 143)
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_error_a_sigterm_caused_in_a_library_is_the_sigterm(monkeypatch, capsys) -> None:
    """A SIGTERM that lands in a library's import can come out as another error (transformers turns an
    interrupt there into a ModuleNotFoundError): it is still the signal's end, one line, exit 143."""

    def app(**_: object) -> None:
        with stopping_on_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                raise ModuleNotFoundError("No module named 'transformers.models.auto'") from None

    monkeypatch.setattr(cli_main, "app", app)
    try:
        with pytest.raises(SystemExit) as ended:
            cli_main.main([])
    finally:
        STOPS.clear()
    assert (ended.value.code, capsys.readouterr().err) == (143, "stopped by SIGTERM\n")


@pytest.mark.slow
def test_ctrl_c_says_where_to_resume(tmp_path: Path) -> None:
    out = tmp_path / "q"
    r = interrupted_train(out)
    assert r.returncode == 130, r.stderr
    assert "\r" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines[-1] == resume_line(out)
    assert all(line.startswith("train: ") for line in lines[:-1]), lines  # progress, as whole lines


@pytest.mark.distributed
@pytest.mark.slow
def test_ctrl_c_with_rollout_workers_says_it_once(tmp_path: Path) -> None:
    """Trainer and worker get the signal (forwarded by the command): the trainer says it; --quiet: nothing
    else."""
    out = tmp_path / "q"
    r = interrupted_train(out, "--option", "rollout_workers=1", "--quiet")
    assert (r.returncode, r.stderr) == (130, resume_line(out) + "\n")


API_TRAIN = """
import sys, srpo_dsl
try:
    srpo_dsl.load("workflows/quickstart.srpo").train(
        sys.argv[1], steps=10000, batch=4, group=2, eval_every=100000, eval_size=4, save_every=1, rollout_workers=1
    )
except KeyboardInterrupt:
    print("KeyboardInterrupt")
"""


@pytest.mark.distributed
@pytest.mark.slow
def test_ctrl_c_through_the_api_with_rollout_workers_is_a_keyboard_interrupt(tmp_path: Path) -> None:
    """`Workflow.train` starts 1 + R processes: a Ctrl-C stops them and reaches the caller as Python's
    KeyboardInterrupt (not an InputError saying `exit code 130`)."""
    out = tmp_path / "q"
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", API_TRAIN, str(out)], cwd=ROOT, env=env, stdout=PIPE, stderr=PIPE
    )
    began = time.monotonic()
    while not (out / "checkpoints" / "step-1").is_dir() and proc.poll() is None:
        assert time.monotonic() - began < 300, "no checkpoint in 300 s"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, stdout.decode()) == (0, "KeyboardInterrupt\n"), stderr.decode()[-2000:]
