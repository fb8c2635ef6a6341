"""Where a launch's processes write (`Outputs`), and their output relayed, line by line, to this
process's `sys.stdout` and `sys.stderr`, its error lines kept (`relayed`).

Through the API, a run with rollout workers is several processes (`api.launch`). What they write to
their file descriptors 1 and 2 would bypass the Python objects a notebook shows (its cells display
what is written to `sys.stdout` and `sys.stderr`): a worker's warning, the progress lines, a user's
`print` in a reward. Each stream goes through a pipe instead, read by a thread of this process that
writes every line to the current `sys` object; the `error: ` lines are kept for the API's message.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

JOIN_SECONDS = 5.0  # for the last lines once the processes ended (a grandchild may hold a pipe open)


@dataclass(frozen=True)
class Outputs:
    """Where a launch's processes write (None: this process's own file descriptors 1 and 2), and whether
    they show progress."""

    stdout: IO[str] | None = None
    stderr: IO[str] | None = None
    progress: bool = True

    def env(self) -> dict[str, str]:
        """The variables the processes get for it (tqdm's own switch, which `progress` honours)."""
        return {} if self.progress else {"TQDM_DISABLE": "1"}


class Relay:
    """The write ends the processes get (`stdout`, `stderr`) and the error lines read so far."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []
        self.stdout = self.pipe(lambda: sys.stdout, keep=False)
        self.stderr = self.pipe(lambda: sys.stderr, keep=True)

    def pipe(self, sink: Callable[[], IO[str]], keep: bool) -> IO[str]:
        """A pipe whose lines go to `sink()` (the `sys` object of the moment); its write end."""
        read, write = os.pipe()
        thread = threading.Thread(target=self.copy, args=(read, sink, keep), name="srpo-relay", daemon=True)
        thread.start()
        self.threads.append(thread)
        return os.fdopen(write, "w", encoding="utf-8", buffering=1)

    def copy(self, fd: int, sink: Callable[[], IO[str]], keep: bool) -> None:
        """A thread: every line of the pipe to `sink()`, as it comes; the error lines kept (`keep`)."""
        with open(fd, encoding="utf-8", errors="replace", newline="") as source:
            for line in source:
                stream = sink()
                stream.write(line)
                stream.flush()
                if keep and line.startswith("error: "):
                    self.errors.append(line.rstrip("\r\n"))

    def close(self) -> None:
        """The processes ended: the write ends closed, the last lines relayed."""
        self.stdout.close()
        self.stderr.close()
        for thread in self.threads:
            thread.join(timeout=JOIN_SECONDS)


@contextmanager
def relayed() -> Iterator[Relay]:
    """A relay for the block (its processes ended at its end)."""
    relay = Relay()
    try:
        yield relay
    finally:
        relay.close()
