"""A run folder's owner: the one process that writes it, for the run's life (docs/cli.md, "One writer
per run folder").

`owning(folder)` holds an exclusive `fcntl.flock` on FOLDER/.lock, which names the owner (pid, host,
start time, command). The OS releases the lock when the process ends, however it ends, so it is never
stale. Another `train` (or `--resume`) of the folder is refused before it writes anything, with one
line naming the live owner. The owner is the process that writes the folder: a run in one process,
rank 0 under a launcher (torchrun, deepspeed), or the launcher of a run's 1 + R processes
(`api.launch`), whose processes write under its lock (`srpo_dsl.launched`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from srpo_dsl.errors import UsageError
from srpo_dsl.launched import command_pid, launcher
from srpo_dsl.runfolder import LOCK


def owner_here() -> bool:
    """Whether this process owns the run folder it trains: not a rank > 0, nor a process of a launcher
    that holds the folder's lock for it."""
    return launcher() is None and os.environ.get("RANK", "0") == "0"


def check_free(folder: Path) -> None:
    """Refuse (UsageError) a folder that another live process owns; takes nothing."""
    path = folder / LOCK
    if not owner_here() or not path.is_file():
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if not _flock(fd, fcntl.LOCK_SH):
            raise UsageError(in_use(folder, fd))
    finally:
        os.close(fd)  # a shared lock taken is released with it


@contextmanager
def owning(folder: Path) -> Iterator[None]:
    """Own `folder` for the block (created if absent; removed afterwards if this created it and left it
    empty). A folder another live process owns is refused (UsageError) before anything is written."""
    if not owner_here():
        yield
        return
    created = not folder.exists()
    path = folder / LOCK
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = _lock(path)
    except OSError as exc:
        raise UsageError(f"cannot write {folder}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        with suppress(OSError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                path.unlink()
        os.close(fd)
        if created:
            with suppress(OSError):
                folder.rmdir()


def _lock(path: Path) -> int:
    """An open descriptor of `path` holding its exclusive lock, the owner's details written in it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _flock(fd, fcntl.LOCK_EX):
            message = in_use(path.parent, fd)
            os.close(fd)
            raise UsageError(message)
        with suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        os.close(fd)  # the owner before removed the file as it ended: lock the one there now
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(_me()).encode())
    return fd


def _flock(fd: int, mode: int, grace: float = 1.0) -> bool:
    """Whether `fd` took the lock (`mode`) within `grace` seconds: an owner killed a moment ago (with the
    command's watcher, `cli.watch`) releases it as the kernel ends it."""
    deadline = time.monotonic() + grace
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def _me() -> dict[str, object]:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return {"pid": command_pid(), "host": socket.gethostname(), "started": started, "command": _command()}


def _command() -> str:
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if argv and Path(argv[0]).name.startswith("python"):
        argv[0] = "python"
    return shlex.join(argv).replace("\n", "\\n")  # one line (a `python -c` script may hold several)


def in_use(folder: Path, fd: int) -> str:
    """`FOLDER is in use by another run: pid N on HOST since TIME (COMMAND); ...` from the lock's file."""
    owner = _owner(fd)
    who = "another process"
    if owner:
        who = f"pid {owner['pid']} on {owner['host']} since {owner['started']} ({owner['command']})"
    return f"{folder} is in use by another run: {who}; wait for it to end or stop it, or choose another --out"


def _owner(fd: int, wait: float = 2.0) -> dict[str, object]:
    """The owner's details in the lock's file; {} if unreadable. The owner writes them just after it takes
    the lock, so an empty file is read again for up to `wait` seconds (a busy machine delays that write)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            owner = json.loads(os.pread(fd, 65536, 0))
            if {"pid", "host", "started", "command"} <= owner.keys():
                return owner
        except (ValueError, AttributeError, OSError):  # the owner is writing its details this instant
            pass
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.05)
