"""A command that dies with the process that starts it: `python -m srpo_dsl.tethered PID ARGV...`.

`tethered(argv)` is `argv` started through this module: on Linux the Python it starts asks for SIGKILL
when its parent ends (`launched.die_with`, which first checks that its parent is still PID), then
becomes `argv` (`exec`: the same pid, and the request holds across it). A sweep starts its runs so
(`sweep.runner`): a `kill -9` of the sweep takes each run's `train` (and the child it watches) or its
`torchrun` (and so its ranks, `launched`) with it, instead of leaving them training. (Linux sends the
signal when the thread that started the command ends: a sweep's thread waits for its run.) Elsewhere
`argv` is started as given.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from srpo_dsl.launched import die_with


def tethered(argv: Sequence[str]) -> list[str]:
    """`argv`, to be started by this process and to die with it (see the module)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-m", "srpo_dsl.tethered", str(os.getpid()), *argv]


def main(args: Sequence[str]) -> None:
    """`PID ARGV...`: die with PID, then become ARGV."""
    die_with(int(args[0]))
    os.execvp(args[1], list(args[1:]))


if __name__ == "__main__":
    main(sys.argv[1:])
