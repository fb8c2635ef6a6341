"""DeepSpeed's ops compiled on first use (torch's JIT extensions, one folder per op under
TORCH_EXTENSIONS_DIR): a lock that a killed build left, removed; a line while an op builds.

torch's builder takes `OP/lock` (`torch.utils.file_baton.FileBaton`: created exclusively, its descriptor
held open for the build, removed at the end); every other process waits, silently and forever, while
the file exists. A build that is killed (a Ctrl-C during a first multi-rank run) leaves the file, and
every later run hangs. A lock that no process of this machine holds open, older than `SETTLE_S`, is such
a leftover: removed, with one line. Without /proc (not Linux) nothing is removed: the line names it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from srpo_dsl.console import note

SHM_OP = "deepspeed_shm_comm"  # what a CPU run of several ranks builds (DeepSpeed's ShareMemCommBuilder)
SETTLE_S = 10.0  # a younger unheld lock may be one being released (closed, not yet removed): waited for
PROC = Path("/proc")


def holders(lock: Path) -> list[int] | None:
    """The processes of this machine that hold `lock` open; None where that cannot be known (no /proc)."""
    if not PROC.is_dir():
        return None
    target, found = os.path.realpath(lock), []
    for fds in PROC.glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == target for fd in fds.iterdir()):
                found.append(int(fds.parent.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def age_s(path: Path) -> float | None:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None


def clear_stale_lock(lock: Path) -> bool:
    """Remove `lock` if it is a dead build's (see the module); True if it was removed here. A lock held
    open is a live build, which torch waits for."""
    held = holders(lock)
    if held is None:
        note(f"note: {lock} exists; if no build of this op is running, remove it (else runs wait on it)")
        return False
    age = age_s(lock)
    if held or age is None:
        return False
    if age < SETTLE_S:  # on a folder that machines share, another machine's build may have just started
        time.sleep(SETTLE_S - age)
        if holders(lock) or age_s(lock) is None:
            return False
    try:
        lock.unlink()
    except FileNotFoundError:  # another rank removed it first
        return False
    note(f"removed {lock}: left by a build of DeepSpeed's {lock.parent.name} op that was stopped")
    return True


def prepare_builds(root: Path, building: list[str]) -> None:
    """Before DeepSpeed loads its ops from `root`: every dead build's lock removed, and (local rank 0) a
    line for each op of `building` that is not built yet."""
    for lock in sorted(root.glob("*/lock")):
        clear_stale_lock(lock)
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return
    for op in building:
        if not (root / op / f"{op}.so").is_file():
            note(f"building DeepSpeed's {op} op in {root / op} (about 60 s, the first time only)...")
