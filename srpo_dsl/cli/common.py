"""Shared CLI plumbing: exit codes, one-line errors, atomic writes."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class CliError(Exception):
    """A user-facing failure: printed as one line, exits with `code`."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_USAGE) -> CliError:
    return CliError(message, code)


def eprint(*parts: object) -> None:
    print(*parts, file=sys.stderr)


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename: never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise fail(f"cannot read {path}: it is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {path}: {exc}") from None
