"""Rollout workers that die: the trainer's feed over real gloo groups between processes (a lost worker's
steps go to the others, the first copy of a step is kept, none left is one line), then whole runs
through the command line (a worker killed mid-run, the last one killed, `--resume`); torchrun's ranks
dying with a killed torchrun, and a sweep's runs with a killed sweep."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from srpo_dsl.errors import UsageError
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.rl.distributed.process_group import free_port
from srpo_dsl.rl.transport.feed import Feed, NoWorkerLeft
from srpo_dsl.rl.transport.inbox import Inbox
from srpo_dsl.rl.transport.link import LaunchLayout, Link
from srpo_dsl.rl.transport.worker import send_batch
from srpo_dsl.runlock import check_free
from srpo_dsl.runtime.episode import Episode, Event, Member
from tests.support.clitools import ROOT
from tests.support.runs import QUICKSTART, SMALL, env_threads, first_result, metrics, wait_for_steps

CPU = torch.device("cpu")
STEPS = 4


def marked(worker: int, step: int, version: int) -> Episode:
    """An episode that says who generated which step with which version."""
    ep = Episode(f"w{worker}-s{step}", f"w{worker}-s{step}", 0, {"id": "p"})
    member = Member(0, "solver", 0, "lm", version, [1], [2], [-0.5], "x", True)
    ep.events = [Event("e1", "solver", "n", "s", 1, True, [member])]
    return ep


def _worker(port: int, _: mp.Queue, rank: int, dies_after: int, dies_at: int = -1) -> None:
    """Generates what it is ordered (a marked episode per step); dies right after sending `dies_after`,
    or a second into generating `dies_at` (the other worker meanwhile waits for a later step's version)."""
    store = dist.TCPStore("127.0.0.1", port, 3, False, datetime.timedelta(seconds=30))
    link = Link(LaunchLayout(rank, 1, 2), store, CPU)
    inbox = Inbox(link)
    link.read(inbox)
    while (taken := inbox.next_step()) is not None:
        order = taken[0]
        if order.step == dies_at:
            time.sleep(1.0)
            os._exit(9)
        link.flush()
        send_batch(link, order.step, inbox.loaded, 0.0, [marked(rank, order.step, inbox.loaded)], 1)
        if order.step == dies_after:
            link.flush()
            os._exit(9)  # killed: no goodbye
    link.flush()


def _trainer(port: int, out: mp.Queue, steps: int = STEPS) -> None:
    """Takes steps 1..`steps` as the trainer does (no model: no weights to send, only versions)."""
    store = dist.TCPStore("127.0.0.1", port, 3, True, datetime.timedelta(seconds=30))
    link = Link(LaunchLayout(0, 1, 2), store, CPU)
    feed = Feed(link, TrainOptions(steps=steps, rollout_workers=2, max_staleness=1), {}, CPU)
    feed.begin({}, 0, [])
    taken = []
    try:
        for step in range(1, steps + 1):
            episodes, stats = feed.batch(step)
            taken.append((episodes[0].prompt_id, episodes[0].events[0].members[0].policy_version))
            taken.append(stats["async/workers"])
            feed.publish({}, step)
        feed.close()
    except NoWorkerLeft as exc:
        taken.append(str(exc))
    out.put(taken)
    link.close()


def run_feed(dies_after: dict[int, int], dies_at: dict[int, int] | None = None, steps: int = STEPS) -> list:
    at = dies_at or {}
    workers = [(_worker, (r, dies_after.get(r, -1), at.get(r, -1))) for r in (1, 2)]
    return first_result([(_trainer, (steps,)), *workers])


def test_a_lost_workers_steps_go_to_the_other_and_what_it_sent_is_kept(capfd: pytest.CaptureFixture) -> None:
    """Worker rank 2 (steps 2 and 4) dies once step 2 is sent: step 2 is its copy, step 4 worker 1's."""
    taken = run_feed({2: 2})
    assert taken[0::2][:3] == [("w1-s1", 0), ("w2-s2", 0), ("w1-s3", 1)]
    assert taken[6][0] == "w1-s4" and taken[6][1] in (2, 3)  # its target, or the trainer's version then
    assert taken[1] == 2 and taken[-1] == 1  # workers running, as the trainer knows it at each step
    err = capfd.readouterr().err
    assert (
        "warning: rollout worker 1 (rank 2) stopped (" in err and "its steps go to the 1 worker left" in err
    )


def test_a_worker_lost_while_the_other_waits_for_a_later_steps_version(capfd: pytest.CaptureFixture) -> None:
    """Worker rank 2 dies generating step 4, while worker 1, done with step 5, waits for step 7's version
    (5, made from step 4's batch): step 4 goes to worker 1, which takes it first (it used to wait on:
    a deadlock, CI's hung test_a_killed_worker_then_the_last_one_then_resume)."""
    taken = run_feed({}, {2: 4}, steps=8)
    assert [prompt for prompt, _ in taken[0::2]] == [
        "w1-s1",
        "w2-s2",
        "w1-s3",
        *(f"w1-s{t}" for t in range(4, 9)),
    ]
    assert taken[-1] == 1 and "its steps go to the 1 worker left" in capfd.readouterr().err


def test_with_no_worker_left_the_trainer_stops_with_one_line() -> None:
    taken = run_feed({1: 1, 2: 2})
    assert taken[0::2][:2] == [("w1-s1", 0), ("w2-s2", 0)]
    message = taken[-1]
    assert isinstance(message, str) and "\n" not in message
    assert (
        "rollout worker 0 (rank 1) stopped (" in message and "rollout worker 1 (rank 2) stopped (" in message
    )
    assert message.endswith(": no rollout worker is left")


# --- whole runs --------------------------------------------------------------------------------------


def trainer_and_workers(launcher: subprocess.Popen) -> dict[int, psutil.Process]:
    """The launched processes of a self-launched run, by rank (under the command's watched child)."""
    found = {}
    for child in psutil.Process(launcher.pid).children(recursive=True):
        if "RANK" in (environ := child.environ()):
            found[int(environ["RANK"])] = child
    return found


@pytest.mark.distributed
@pytest.mark.slow
def test_a_killed_worker_then_the_last_one_then_resume(tmp_path: Path) -> None:
    """Two workers: one killed at step 2, the run goes on; the other killed at step 4: the trainer
    checkpoints what it trained and stops with one line; `--resume` with two fresh workers finishes."""
    out = tmp_path / "run"
    args = ["train", QUICKSTART, "--out", out, *SMALL, "--steps", "8", "--option", "save_every=8"]
    args += ["--option", "rollout_workers=2", "--option", "max_staleness=1"]
    command = [sys.executable, "-m", "srpo_dsl", *map(str, args)]
    env = env_threads(3)
    launcher = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_steps(launcher, out, 2)
    ranks = trainer_and_workers(launcher)
    ranks[2].send_signal(signal.SIGKILL)
    wait_for_steps(launcher, out, 4)
    ranks[1].send_signal(signal.SIGKILL)
    _, stderr = launcher.communicate(timeout=240)
    assert launcher.returncode not in (0, None), stderr[-3000:]
    assert "warning: rollout worker 1 (rank 2) stopped (" in stderr
    last = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(last) == 1 and "no rollout worker is left: step " in last[0], stderr[-3000:]
    assert "Traceback" not in stderr
    done = int(last[0].split(": step ")[1].split()[0])
    assert done >= 4 and (out / "checkpoints" / f"step-{done}").is_dir()
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, done + 1))
    # `async/workers` counts the workers alive when a step's batch is taken; a killed worker is seen when
    # its connection closes, which a loaded machine may notice only after steps 3 and 4 were taken
    alive = [r["async/workers"] for r in rows]
    assert alive[0] == 2 and alive == sorted(alive, reverse=True) and alive[-1] >= 1
    more = subprocess.run(
        [*command, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert more.returncode == 0, more.stderr[-3000:]
    assert [r["step"] for r in metrics(out)] == list(range(1, 9))
    assert json.loads((out / "eval.jsonl").read_text().splitlines()[-1])["step"] == 8


@pytest.mark.distributed
@pytest.mark.slow
def test_a_worker_killed_before_it_joined_ends_the_launch_at_once(tmp_path: Path) -> None:
    """A rollout worker that dies before every process joined the launch (killed while it starts: a node
    out of memory) ends it with one line, at once: the trainer would wait for it at the rendezvous for
    half an hour (CI's lost 20 minutes, when a worker refused the run folder another rank probed)."""
    out = tmp_path / "run"
    args = ["train", QUICKSTART, "--out", out, *SMALL, "--option", "rollout_workers=1"]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "srpo_dsl", *map(str, args)],
        cwd=ROOT, env=env_threads(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    ranks: dict[int, psutil.Process] = {}
    while 1 not in ranks:  # a child's RANK is there once it runs python
        assert launcher.poll() is None, launcher.communicate()[1]
        with suppress(KeyError, psutil.Error):
            ranks = trainer_and_workers(launcher)
        time.sleep(0.01)
    ranks[1].send_signal(signal.SIGKILL)
    clock = time.time()
    _, stderr = launcher.communicate(timeout=120)
    assert time.time() - clock < 30 and launcher.returncode == 128 + signal.SIGKILL
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: rollout worker 0 (rank 1) ended (SIGKILL) before every process joined the launch: "
        "nothing was trained"
    ]
    assert not out.exists() and not ranks[0].is_running()


def locked(out: Path) -> bool:
    """Whether a live process holds the run folder's lock (a `--resume` would be refused)."""
    try:
        check_free(out)
    except UsageError:
        return True
    return False


@pytest.mark.distributed
@pytest.mark.slow
def test_a_killed_torchrun_takes_its_ranks_and_the_lock_with_it(tmp_path: Path) -> None:
    """SIGKILL of `torchrun` (whose ranks run in sessions of their own): both ranks are gone within
    seconds, and no orphan holds the run folder's lock against a `--resume`."""
    out = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    torchrun += ["--master_port", str(free_port()), "-m", "srpo_dsl"]
    args = ["train", QUICKSTART, "--out", out, *SMALL, "--steps", "1000"]
    launcher = subprocess.Popen(
        [*torchrun, *map(str, args)], cwd=ROOT, env=env_threads(1), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    ranks: list[psutil.Process] = []
    try:
        deadline = time.time() + 300
        while not locked(out):  # rank 0 took the lock: both ranks run srpo-dsl
            assert launcher.poll() is None and time.time() < deadline, "no rank took the run folder"
            time.sleep(0.1)
        ranks = psutil.Process(launcher.pid).children()
        assert len(ranks) == 2
        launcher.kill()
        launcher.wait()
        _, alive = psutil.wait_procs(ranks, timeout=10)
        assert alive == [], [p.cmdline() for p in alive]
        assert not locked(out)
    finally:
        for process in ranks:
            with suppress(psutil.Error):
                process.kill()


TETHERING = """
import subprocess, sys, time
from srpo_dsl.tethered import tethered
child = subprocess.Popen(tethered([sys.executable, "-c", "import time; time.sleep(120)"]))
print(child.pid, flush=True)
time.sleep(120)
"""


def test_what_a_sweep_starts_dies_with_the_sweep_however_it_ends() -> None:
    """A sweep starts each run's `train` or `torchrun` tethered to itself (`srpo_dsl.tethered`): a SIGKILL
    of the sweep ends it (then torchrun's ranks end with torchrun), none trains on."""
    assert "tethered(train_command(" in (ROOT / "srpo_dsl" / "sweep" / "runner.py").read_text()
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    sweep = subprocess.Popen(
        [sys.executable, "-c", TETHERING], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    run = psutil.Process(int(sweep.stdout.readline()))
    try:
        while "time.sleep(120)" not in " ".join(run.cmdline()):  # it became the command, same pid
            time.sleep(0.01)
        sweep.kill()
        sweep.wait()
        run.wait(timeout=10)
    finally:
        with suppress(psutil.Error):
            run.kill()
        sweep.stdout.close()


def test_a_resume_may_change_the_number_of_workers_not_the_staleness_bound() -> None:
    """After the last worker is gone a run resumes with the workers there are (docs/training.md)."""
    from srpo_dsl.rl.loop.checkpoint import resume_changes

    before = {"options": {"steps": 4, "rollout_workers": 2, "max_staleness": 1}}
    fewer = {"options": {"steps": 8, "rollout_workers": 1, "max_staleness": 1}}
    looser = {"options": {"steps": 4, "rollout_workers": 2, "max_staleness": 2}}
    assert resume_changes(before, fewer) == []
    assert resume_changes(before, looser) == [("max_staleness", 1, 2)]


def test_a_refused_resume_names_each_changed_option_with_its_old_and_new_values() -> None:
    """A key given then left out reads `not given`; a long value is cut to one short line."""
    from srpo_dsl.rl.loop.checkpoint import describe_changes, resume_changes

    before = {"eval_data": ["/data/held.jsonl"], "options": {"lr": 0.0004, "steps": 4, "group": 8}}
    now = {"options": {"lr": 0.5, "steps": 8, "group": 8, "tokens": "x" * 400}}
    said = describe_changes(resume_changes(before, now))
    assert said.startswith(
        'eval_data was ["/data/held.jsonl"], now not given; lr was 0.0004, now 0.5; tokens was not given, now "xxx'
    )
    assert said.endswith("...") and len(said) < 300 and "\n" not in said


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty"])
def test_a_damaged_rank_state_file_is_one_line_naming_it(tmp_path: Path, how: str) -> None:
    """An RNG (or rank) state of a checkpoint that a failing disk cut short or garbled was torch.load's own
    error, "internal error": `--resume` reads each through `read_saved`, one `UsageError` naming the file;
    a truncated engine state is found among its folder's files (`damaged_file`)."""
    from srpo_dsl.errors import UsageError
    from srpo_dsl.rl.loop.checkpoint import damaged_file, read_saved, rng_state

    path = tmp_path / "rng-rank0.pt"
    torch.save(rng_state(), path)
    assert read_saved(path)["torch"].equal(torch.get_rng_state())
    whole = path.read_bytes()
    damage = {"truncated": whole[: len(whole) // 2], "garbage": bytes(range(256)) * 4, "empty": b""}
    path.write_bytes(damage[how])
    with pytest.raises(
        UsageError, match=rf"^cannot resume from {re.escape(str(path))}: cannot read it back \(\w+: "
    ):
        read_saved(path)
    (tmp_path / "whole.pt").write_bytes(whole)
    assert damaged_file(tmp_path) == path and damaged_file(tmp_path / "nowhere") == tmp_path / "nowhere"
