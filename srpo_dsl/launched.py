"""A process that `srpo-dsl` launched dies with its launcher (`api.launch.relaunch`), and says when it joined.

The launcher names itself in `LAUNCHER` (its pid). At its start, before anything else, a launched
process asks Linux to kill it when its parent ends (`prctl(PR_SET_PDEATHSIG, SIGKILL)`), then checks
that its launcher is still its parent: one that was killed before the request was made is already
gone, and the process ends at once. The kernel sends the signal however the launcher ends (SIGKILL
included) and whatever the process is doing (a collective, a C call), so no rank or rollout worker
outlives its launcher and writes beside a later `--resume`; a thread that watched the parent's pid
would wait on Python's interpreter lock and its polling interval. (Linux only: elsewhere a launcher
stops its processes when it ends of a signal it can catch, not of SIGKILL.) A rank that torch's elastic
launcher started (`torchrun`: `TORCHELASTIC_RUN_ID` set) dies with it the same way: torchrun starts each
rank in a session of its own and does not stop them when it is killed, and they would train on (or
wait in a collective) holding the run folder's lock. torchrun does not name its pid: the parent a rank
finds as `srpo_dsl` starts is taken for it (a torchrun killed in the milliseconds before that, while the
rank's interpreter starts, is not noticed).

Once it joined the launch (every process is connected), a launched process marks it in the `JOINED`
folder of its launcher (the self-launch's, or its Ray actor's): until then the launcher stops the launch
when any process ends (the others would wait for it at the rendezvous); after, only the trainer's end
does (a lost rollout worker's steps go to the others). Trainer rank 0 marks there too when it ends
through Python (`mark_ended`: a return, an error line, a signal's exit code), as a command watched by
`srpo_dsl.cli.watch` does in its watcher's folder: a process that exits without that mark and was not
ended by a signal skipped every handler (an `os._exit` in user code), and its launcher says so.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from contextlib import suppress
from pathlib import Path

from srpo_dsl.stopping import STOPPING

LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # a launcher's
LAUNCHER = "SRPO_DSL_LAUNCHER"  # the launcher's pid, in the environment of the processes it starts
ELASTIC = "TORCHELASTIC_RUN_ID"  # set by torch's elastic launcher (torchrun) in each rank it starts
JOINED = "SRPO_DSL_JOINED"  # the launcher's folder where each process it started marks that it joined
FORWARDED = (signal.SIGINT, *STOPPING)  # what a launcher or watcher passes on to its processes
ENDED = "ended"  # the mark of a process that ended through Python, in its launcher's or watcher's folder
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


WATCHER: list[int] = []  # the pid of the command that watches this process (`cli.watch`), once forked


def command_pid() -> int:
    """The pid of the command the user started: its watcher's, in a watched child (`cli.watch`)."""
    return WATCHER[0] if WATCHER else os.getpid()


def launcher() -> int | None:
    """The pid of the `srpo-dsl` launcher that started this process (None: no launcher did)."""
    value = os.environ.get(LAUNCHER, "")
    return int(value) if value.isdigit() and int(value) == os.getppid() else None


def follow_launcher() -> None:
    """When a launcher started this process, end it with the launcher (see the module)."""
    named = os.environ.get(LAUNCHER, "")
    if not named.isdigit():
        if ELASTIC in os.environ and "RANK" in os.environ:  # a rank of torchrun, its parent
            die_with(os.getppid())
        return
    if int(named) != os.getppid():
        if not _alive(int(named)):  # orphaned before this line: the launcher is gone
            os._exit(128 + signal.SIGKILL)
        return  # a process a launched one started in turn: not launched by it
    die_with(int(named))


def die_with(parent: int) -> None:
    """Ask Linux to kill this process when its parent ends; end now if `parent` (its pid at the start)
    already ended before the request (no signal would come). Elsewhere, nothing."""
    if not sys.platform.startswith("linux"):
        return
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)


def mark_joined() -> None:
    """This process joined its launch: its mark (its RANK) in its launcher's `JOINED` folder, if any."""
    folder = os.environ.get(JOINED)
    if folder and os.path.isdir(folder):
        Path(folder, os.environ.get("RANK", "0")).touch()


def mark_ended(folder: str | None = None) -> None:
    """This process ends through Python: its `ENDED` mark in `folder` (its watcher's), or, as trainer rank
    0 of a launch, in its launcher's `JOINED` folder (see the module)."""
    if folder is None and os.environ.get("RANK", "0") == "0":
        folder = os.environ.get(JOINED)
    if folder and os.path.isdir(folder):
        Path(folder, ENDED).touch()


def joined_count(folder: str | Path) -> int:
    """How many processes marked in `folder` that they joined (each mark is its RANK)."""
    return sum(name.isdigit() for name in os.listdir(folder))


def role(rank: int, trainers: int) -> str:
    """How srpo-dsl names global rank `rank` of a launch whose first `trainers` ranks train."""
    if rank >= trainers:
        return f"rollout worker {rank - trainers} (rank {rank})"
    return f"trainer rank {rank}"


def ended_before_joining(rank: int, trainers: int, why: str) -> str:
    """The line for a process that ended (`why`) before every process joined its launch."""
    joined = "before every process joined the launch: nothing was trained"
    return f"error: {role(rank, trainers)} ended ({why}) {joined}"


def ended_unsaid(what: str, code: int) -> str:
    """The line for a process that exited `code` without its `ENDED` mark: `what` stopped, said nowhere."""
    why = "without an error" if code == 0 else f"with exit code {code} and no error"
    return f"error: {what} {why} (a process exited early: os._exit in user code?)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
