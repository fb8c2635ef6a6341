"""What srpo-dsl itself says on stderr, and how much: the process's level, set once by the command line.

`--quiet` (QUIET): errors only; the command's results still go to stdout. The default (NORMAL): also
notes, warnings and progress. `--verbose` (VERBOSE): also the libraries' logs and build output. The API
runs at NORMAL unless a caller sets another level."""

from __future__ import annotations

import sys

QUIET, NORMAL, VERBOSE = 0, 1, 2
_level = [NORMAL]


def set_level(level: int) -> None:
    _level[0] = level


def level() -> int:
    return _level[0]


def quiet() -> bool:
    return _level[0] == QUIET


def note(message: str) -> None:
    """A line on stderr (a warning, what is happening, a summary), unless --quiet."""
    if not quiet():
        print(message, file=sys.stderr, flush=True)
