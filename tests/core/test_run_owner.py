"""One writer per run folder: the process that writes it holds a lock for the run's life (`runlock`); a
second `train` or a `--resume` beside it is refused with one line naming it, and the processes a run
launches die with their launcher (`launched`), so a `--resume` after a killed launcher writes alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from srpo_dsl.errors import UsageError
from srpo_dsl.outputs import PROBE, held
from srpo_dsl.runfolder import LOCK
from srpo_dsl.runlock import check_free, owning
from tests.support.clitools import ROOT, cli
from tests.support.runs import QUICKSTART, env_threads, metrics

SMALL = ["--batch", "2", "--group", "2", "--option", "eval_size=2", "--option", "eval_k=1"]
LONG = ["--steps", "100000", *SMALL]  # killed long before its end


def command(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "srpo_dsl", "train", str(QUICKSTART), "--out", str(out), *args]


def train(out: Path, *args: str, threads: int = 1, log: Path | None = None) -> subprocess.Popen:
    """`srpo-dsl train` started; its output piped, or written to `log` (a pipe would outlive a killed
    launcher in its children, and reading it to its end would wait for them)."""
    output = subprocess.PIPE if log is None else log.open("w")
    return subprocess.Popen(
        command(out, *args), cwd=ROOT, env=env_threads(threads), stdout=output, stderr=output, text=True
    )


def in_use_line(out: Path, pid: int) -> str:
    """The refusal's line, up to the owner's start time and command."""
    return f"error: {out} is in use by another run: pid {pid} on {socket.gethostname()} since "


def until(condition, what: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, what
        time.sleep(0.1)


def hold(folder: Path) -> subprocess.Popen:
    """A process owning `folder` until it is killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from srpo_dsl.runlock import owning; from pathlib import Path\n"
         "with owning(Path(sys.argv[1])):\n    print('owned', flush=True); time.sleep(600)", str(folder)],
        stdout=subprocess.PIPE, text=True, env=env_threads(1),
    )  # fmt: skip
    assert holder.stdout.readline() == "owned\n"
    return holder


def test_a_sweep_folder_has_one_writer_too(tmp_path: Path) -> None:
    """A second `sweep` of a sweep folder is refused, as a second `train` is (each of its runs is a `train`)."""
    out = tmp_path / "sweep"
    holder = hold(out)
    try:
        r = cli("sweep", "experiments/toy_ablation.toml", "--out", out, env=env_threads(1))
    finally:
        holder.kill()
        holder.wait()
    assert (
        r.returncode == 2 and r.stderr.startswith(in_use_line(out, holder.pid)) and r.stderr.count("\n") == 1
    )


def test_a_folder_is_owned_by_one_process_and_released_when_it_dies(tmp_path: Path) -> None:
    """The lock names its owner, is refused to a second process, ignored as a result, and released by
    the OS when its owner is killed (no stale lock: the next owner takes it)."""
    out = tmp_path / "run"
    holder = hold(out)
    owner = json.loads((out / LOCK).read_text())
    assert owner["pid"] == holder.pid and "owning" in owner["command"]
    assert held(out) == []  # an owned folder with nothing in it holds no results
    with pytest.raises(UsageError, match=f"^{out} is in use by another run: pid {holder.pid} on "):
        check_free(out)
    with pytest.raises(UsageError, match=r"choose another --out$"), owning(out):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    check_free(out)
    with owning(out):
        assert json.loads((out / LOCK).read_text())["pid"] == os.getpid()
    assert list(out.iterdir()) == []  # an owner that ends removes its lock file


def test_another_ranks_probe_is_no_result_but_anything_else_is(tmp_path: Path) -> None:
    """The ranks of one launch check the run folder at once: one rank's passing writability probe is not
    taken by another for results (CI: a launched trainer refused its own fresh folder)."""
    out = tmp_path / "run"
    (out / f"{PROBE}1a2b").mkdir(parents=True)
    assert held(out) == []
    (out / "metrics.jsonl").write_text("")
    (out / "probe").mkdir()
    assert held(out) == ["metrics.jsonl", "probe"]


@pytest.mark.slow
def test_two_trains_on_one_folder_and_a_resume_beside_them(tmp_path: Path) -> None:
    """Two `train` commands started together on one --out: one trains, the other is refused before it
    writes anything; `--resume` while the run is alive is refused too."""
    out = tmp_path / "run"
    both = [train(out, *LONG), train(out, *LONG)]
    until(lambda: any(p.poll() is not None for p in both), "neither train was refused")
    refused, owner = both if both[0].poll() is not None else both[::-1]
    _, err = refused.communicate()
    assert refused.returncode == 2 and err.count("\n") == 1 and owner.poll() is None, err
    assert err.startswith(in_use_line(out, owner.pid))
    resumed = subprocess.run(
        command(out, *LONG, "--resume"), cwd=ROOT, env=env_threads(1), capture_output=True, text=True
    )
    assert resumed.returncode == 2 and resumed.stderr.startswith(in_use_line(out, owner.pid))
    owner.kill()
    owner.communicate()


@pytest.mark.distributed
@pytest.mark.slow
def test_a_killed_launchers_processes_die_with_it_then_resume_writes_alone(tmp_path: Path) -> None:
    """SIGKILL of the launcher of an asynchronous run (a trainer and a rollout worker): both are gone
    within seconds, and a `--resume` then continues from the last checkpoint, each step once."""
    out = tmp_path / "run"
    workers = ["--option", "rollout_workers=1", "--option", "save_every=1"]
    launcher = train(out, *LONG, *workers, threads=2, log=tmp_path / "log")
    until(lambda: (out / "metrics.jsonl").exists() and len(metrics(out)) >= 2, "no 2 steps trained")
    children = psutil.Process(launcher.pid).children(recursive=True)  # its watched child, and the child's 2
    assert len(children) == 3
    launcher.kill()
    launcher.wait()
    _, alive = psutil.wait_procs(children, timeout=5)
    assert alive == [], [p.cmdline() for p in alive]
    done = max(int(p.name.removeprefix("step-")) for p in (out / "checkpoints").glob("step-*"))
    assert done < 1000  # the run was killed, it did not end
    more = train(out, *SMALL, "--steps", str(done + 1), "--resume", *workers, threads=2)
    _, err = more.communicate(timeout=300)
    assert more.returncode == 0, err[-3000:]
    assert [r["step"] for r in metrics(out)] == list(range(1, done + 2))
