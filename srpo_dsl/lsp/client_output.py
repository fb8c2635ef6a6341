"""The server's stdout as pygls writes to it (`serve`): the client reads its answers there. A client
that closed it has gone (an editor that quit or crashed; its end of stdin closes as well, which stops
the server): what the server still had to say goes nowhere, quietly, where pygls would log a
traceback on stderr for each message it could not send, and another for the error it could not
report."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import BinaryIO, TypeVar

R = TypeVar("R")


class ClientOutput:
    """`stream` (stdout's bytes) until a write finds the client gone, then nothing."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.gone = False

    def write(self, data: bytes) -> int | None:
        return self._unless_gone(self.stream.write, data)

    def flush(self) -> None:
        self._unless_gone(self.stream.flush)

    def close(self) -> None:
        """The stream closed, its file descriptor too (also with bytes for a gone client left in it)."""
        with suppress(BrokenPipeError):
            self.stream.close()

    def _unless_gone(self, op: Callable[..., R], *args: object) -> R | None:
        if self.gone:
            return None
        try:
            return op(*args)
        except BrokenPipeError:
            self.gone = True
            return None
