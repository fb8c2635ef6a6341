"""DeepSpeed's ops built on first use: a lock that a killed build left in the extensions folder no longer
hangs every later run (it is removed, with one line), a live build's lock is left alone, and a line says
when an op is about to be built."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srpo_dsl import console
from srpo_dsl.rl.distributed.op_builds import SHM_OP, prepare_builds
from tests.support.clitools import ROOT

BATON = (
    "import sys, time; from torch.utils.file_baton import FileBaton; FileBaton(sys.argv[1]).try_acquire(); "
)
HOLD = BATON + "print('held', flush=True); time.sleep(120)"


def build_lock(root: Path, op: str) -> Path:
    """Where torch's JIT builder puts `op`'s lock under TORCH_EXTENSIONS_DIR=root (torch's own path)."""
    from torch.utils import cpp_extension

    saved = os.environ.get("TORCH_EXTENSIONS_DIR")
    os.environ["TORCH_EXTENSIONS_DIR"] = str(root)
    try:
        return Path(cpp_extension._get_build_directory(op, verbose=False)) / "lock"
    finally:
        if saved is None:
            del os.environ["TORCH_EXTENSIONS_DIR"]
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = saved


def holding(lock: Path) -> subprocess.Popen:
    """A process that takes `lock` as torch's builder does and keeps it (a build in progress)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.slow
def test_a_dead_builds_lock_is_removed_a_live_ones_kept(tmp_path: Path) -> None:
    dead, live = build_lock(tmp_path, SHM_OP), build_lock(tmp_path, "cpu_adam")
    killed = holding(dead)
    killed.send_signal(signal.SIGKILL)  # a build stopped mid-way: its lock stays
    killed.wait()
    hour_ago = time.time() - 3600
    os.utime(dead, (hour_ago, hour_ago))
    builder = holding(live)
    try:
        os.utime(live, (hour_ago, hour_ago))  # old, but held open: a build still running
        env = os.environ | {"PYTHONPATH": str(ROOT), "TORCH_EXTENSIONS_DIR": str(tmp_path)}
        code = "from srpo_dsl.rl.distributed.process_group import init_distributed; init_distributed('cpu')"
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert live.exists() and not dead.exists()
        said = [line for line in r.stderr.splitlines() if "lock" in line]
        assert said == [f"removed {dead}: left by a build of DeepSpeed's {SHM_OP} op that was stopped"]
    finally:
        builder.kill()
        builder.wait()
    from torch.utils.file_baton import FileBaton

    assert FileBaton(str(dead)).try_acquire()  # what every later run's build waited on is free


def test_a_line_before_an_op_is_built(tmp_path: Path, capfd) -> None:
    prepare_builds(tmp_path, [SHM_OP])
    assert capfd.readouterr().err == (
        f"building DeepSpeed's {SHM_OP} op in {tmp_path / SHM_OP} (about 60 s, the first time only)...\n"
    )
    console.set_level(console.QUIET)
    try:
        prepare_builds(tmp_path, [SHM_OP])
    finally:
        console.set_level(console.NORMAL)
    built = tmp_path / SHM_OP / f"{SHM_OP}.so"
    built.parent.mkdir()
    built.write_bytes(b"")
    prepare_builds(tmp_path, [SHM_OP])  # built before: loading takes a moment, nothing to say
    assert capfd.readouterr().err == ""
