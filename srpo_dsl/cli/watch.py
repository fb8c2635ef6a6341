"""A command that runs user code (`WATCHED`) is carried out by a child process its own process watches.

`os._exit()` in user code (a reward, a tool, a parser) ends the process at once: no `finally`, no
handler, no line, and the exit code it chose, 0 included. A run that stopped half-way must not exit 0,
so on Linux and macOS the command forks before it loads anything: the child carries the command out
and marks, at the end of `cli.main.main`, that it ended through Python (`launched.mark_ended`). The
parent, which only waits, says what happened when the child ended without that mark (one line, exit 1,
the run's step when it was a training run) or of a signal nothing caught (SIGKILL from the kernel's
out-of-memory killer, say; exit 128 + its number). A fork costs milliseconds: nothing heavy is imported
yet, and nothing is checked twice.

As the launcher's processes do (`api.launch`), the child starts a session of its own, so a Ctrl-C
reaches it once, forwarded by the parent, and it dies with the parent however the parent
ends (`launched.die_with`). A process a launcher started (RANK set: torchrun, deepspeed, srpo-dsl's own)
is watched by that launcher and is not forked again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from srpo_dsl.launched import ENDED, FORWARDED, LAUNCHER, WATCHER, die_with, ended_unsaid, mark_ended

WATCHED = ("run", "eval", "train")  # the commands that run user code here (a sweep's cells are `train`s)
WHERE = "where"  # in the watch folder: the run the child trains (`training`), for the parent's line
_FOLDER: list[str] = []  # the child's watch folder, once forked


def watched(argv: list[str]) -> int | None:
    """In the parent, the command's exit code once its child ended; in the child (or when the command is
    not watched), None: carry the command out."""
    command = next((a for a in argv if not a.startswith("-")), None)
    launched = "RANK" in os.environ or LAUNCHER in os.environ
    if command not in WATCHED or launched or not hasattr(os, "fork"):
        return None
    folder = tempfile.mkdtemp(prefix="srpo-dsl-watch-")
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.setsid()
        die_with(parent)
        _FOLDER.append(folder)
        WATCHER.append(parent)  # the pid a run folder's lock names: the command's (`runlock`)
        return None
    try:
        return outcome(command, child, Path(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def outcome(command: str, child: int, folder: Path) -> int:
    """The child's exit code, signals forwarded to it meanwhile; one line and exit 1 when it ended without
    saying why, one line when a signal killed it."""
    kept = [sig for sig in FORWARDED if signal.getsignal(sig) is not signal.SIG_IGN]  # (`nohup`, `cmd &`)
    forward = {sig: signal.signal(sig, lambda s, _: os.kill(child, s)) for sig in kept}
    try:
        _, status = os.waitpid(child, 0)
    finally:
        for sig, handler in forward.items():
            signal.signal(sig, handler)
    code = os.waitstatus_to_exitcode(status)
    if (folder / ENDED).exists():
        return code
    if code < 0:
        print(f"error: {stopped(command, folder)}: killed by {signal.Signals(-code).name}", file=sys.stderr)
        return 128 - code
    print(ended_unsaid(stopped(command, folder), code), file=sys.stderr)
    return 1


def stopped(command: str, folder: Path) -> str:
    """What stopped, and where: the run's step for a training run (`training`)."""
    try:
        where = json.loads((folder / WHERE).read_text())
    except (OSError, ValueError):
        return f"`srpo-dsl {command}` stopped before its end"
    from srpo_dsl.api.launch import stopped_at

    return f"the run stopped at {stopped_at(Path(where['out']), where['steps'])}"


def training(out: Path, steps: int) -> None:
    """The watched child trains the run in `out` to step `steps`: for the parent's line, should it end
    without a word."""
    if _FOLDER:
        Path(_FOLDER[0], WHERE).write_text(json.dumps({"out": str(out), "steps": steps}))


def ended() -> None:
    """The command ends through Python: its mark for whoever watches or launched this process."""
    mark_ended(_FOLDER[0] if _FOLDER else None)
