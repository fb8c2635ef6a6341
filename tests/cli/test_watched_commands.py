"""`run`, `eval` and `train` from the command line are carried out by a watched child (`cli.watch`): an
`os._exit` in user code, which no handler sees, never lets the command exit 0 or end without a line; a
signal that kills the child is said; the child dies with the command however it ends."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srpo_dsl.cli import watch
from tests.support.clitools import ROOT, cli
from tests.support.user_code import make, run_scripted

LEAVES = """import os
from pathlib import Path

def leave(answer, row):
    metrics = Path(os.environ.get("LEAVE_AFTER", "/nonexistent"))
    if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
        os._exit(int(os.environ["LEAVE_CODE"]))
    return float(answer == row["answer"])
"""
SMALL = ["--steps", "4", "--batch", "2", "--group", "2", "--quiet", "--option", "eval_every=100"]
SMALL += ["--option", "eval_size=2", "--option", "save_every=1"]


def quickstart_rewarded_by_leave(tmp_path: Path) -> Path:
    """The quickstart workflow in tmp_path, rewarded by user.py:leave (LEAVES)."""
    shutil.copytree(ROOT / "workflows" / "quickstart", tmp_path / "quickstart")
    (tmp_path / "user.py").write_text(LEAVES)
    text = (ROOT / "workflows" / "quickstart.srpo").read_text()
    path = tmp_path / "w.srpo"
    path.write_text(
        text.replace("reward exact_match(aggregator, task.answer)", 'reward "user.py:leave"(aggregator)')
    )
    return path


@pytest.mark.slow
@pytest.mark.parametrize("code", [0])  # another code's words: the `run` test below (one watcher for both)
def test_os_exit_in_a_reward_mid_run_is_one_line_at_its_step_and_the_run_resumes(tmp_path, code):
    """The reward ends the training process with `os._exit(code)` once 2 of 4 steps are recorded: one line
    naming the step, exit 1; the checkpoints written before are whole, and the run resumes to its end."""
    out, path = tmp_path / "out", quickstart_rewarded_by_leave(tmp_path)
    leaving = os.environ | {"LEAVE_AFTER": str(out / "metrics.jsonl"), "LEAVE_CODE": str(code)}
    r = cli("train", path, "--out", out, *SMALL, env=leaving)
    said = "without an error" if code == 0 else f"with exit code {code} and no error"
    assert (r.returncode, r.stderr) == (
        1,
        f"error: the run stopped at step 2 of 4 {said} (a process exited early: os._exit in user code?)\n",
    )
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-1", "step-2"]
    resumed = cli("train", path, "--out", out, "--resume", *SMALL)
    assert resumed.returncode == 0, resumed.stderr
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


@pytest.mark.parametrize("code", [0, 3])
def test_os_exit_in_a_reward_during_run_is_one_line_and_never_exit_0(tmp_path, code):
    """Exit 3 too is not taken for srpo-dsl's own internal error: the command says what happened."""
    body = f"import os\ndef leave(answer, row):\n    os._exit({code})\n"
    r = run_scripted(tmp_path, make(tmp_path, body, reward="leave"))
    said = "without an error" if code == 0 else f"with exit code {code} and no error"
    assert (r.returncode, r.stderr) == (
        1,
        f"error: `srpo-dsl run` stopped before its end {said} (a process exited early: os._exit in user code?)\n",
    )
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))


def test_a_command_that_ends_through_python_keeps_its_code_and_says_nothing_more(tmp_path):
    """The watcher adds nothing to an ordinary end: success (0) and a user's error line (1)."""
    ok = run_scripted(tmp_path, make(tmp_path))
    assert ok.returncode == 0 and "error" not in ok.stderr, ok.stderr
    body = "def leave(answer, row):\n    raise ValueError('no')\n"
    (tmp_path / "f").mkdir()
    failed = run_scripted(tmp_path / "f", make(tmp_path / "f", body, reward="leave"))
    assert failed.returncode == 1 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr


def children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in found.split()]


def start_training(tmp_path: Path) -> subprocess.Popen:
    """A long training run of the quickstart, once its child (the watched process) has started."""
    cmd = [sys.executable, "-m", "srpo_dsl", "train", str(ROOT / "workflows/quickstart.srpo"),
           "--out", str(tmp_path / "out"), "--steps", "1000", "--batch", "2", "--group", "2", "--quiet"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not children(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


def test_a_killed_child_is_said_and_the_signal_is_the_exit_code(tmp_path):
    """SIGKILL from elsewhere (the kernel's out-of-memory killer): one line, exit 128 + 9."""
    proc = start_training(tmp_path)
    os.kill(children(proc.pid)[0], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL
    assert re.fullmatch(r"error: (the run stopped at step \d+ of 1000|`srpo-dsl train` stopped before its "
                        r"end): killed by SIGKILL", stderr.splitlines()[-1]), stderr  # fmt: skip


def test_the_child_dies_with_the_command_however_it_ends(tmp_path):
    """SIGKILL to the command, which no handler sees: the child ends with it (Linux's parent-death signal),
    and the run folder is free at once for another `train`."""
    proc = start_training(tmp_path)
    child = children(proc.pid)[0]
    proc.kill()
    proc.wait(timeout=60)
    for _ in range(100):
        if subprocess.run(["ps", "-p", str(child)], capture_output=True).returncode:
            break
        time.sleep(0.05)
    assert subprocess.run(["ps", "-p", str(child)], capture_output=True).returncode != 0


def test_only_the_commands_that_run_user_code_are_watched_and_never_a_launched_process(monkeypatch):
    """No fork for `validate` (nothing to watch), for a process a launcher started (RANK), for options."""
    monkeypatch.setattr(os, "fork", lambda: pytest.fail("forked"))
    assert watch.watched(["validate", "w.srpo"]) is None and watch.watched(["--version"]) is None
    monkeypatch.setenv("RANK", "0")
    assert watch.watched(["train", "w.srpo"]) is None
