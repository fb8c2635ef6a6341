"""Shared CLI plumbing: exit codes, one-line errors (atomic writes come from `srpo_dsl.io`)."""

from __future__ import annotations

import sys
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


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise fail(f"cannot read {path}: it is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {path}: {exc}") from None
