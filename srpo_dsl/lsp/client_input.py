"""The server's stdin as pygls reads it (`serve`): the header lines of each message, then its body.
pygls reads a line at a time, each in a worker thread, and ignores a line that is no header; 2 MB of
short garbage lines took it a thread hop each (37 s). Here the lines that cannot be a header (not
blank, no `:`) are passed over in one call, with one line in the log."""

from __future__ import annotations

import logging
from typing import BinaryIO

log = logging.getLogger(__name__)


class ClientInput:
    """`stream` (stdin's bytes), its lines that are no header skipped when a line is read."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream

    def readline(self) -> bytes:
        """The next line that may be a header (`Name: value`) or the blank line after them; b"" at the end."""
        skipped = 0
        while (line := self.stream.readline()) and line.strip() and b":" not in line:
            skipped += 1
        if skipped:
            log.warning("skipped %d lines of input that are not message headers", skipped)
        return line

    def read(self, n: int) -> bytes:
        return self.stream.read(n)
