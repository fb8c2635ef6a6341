"""Shared CLI plumbing: exit codes, one-line errors (atomic writes come from `srpo_dsl.io`)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from enum import Enum
from pathlib import Path

import typer

from srpo_dsl.backends import DECODE_MODES
from srpo_dsl.rl.names import DEVICES

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class CliError(Exception):
    """A user-facing failure: printed as one line, exits with `code`."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_USAGE) -> CliError:
    return CliError(message, code)


def choices(name: str, names: Iterable[str]) -> type[Enum]:
    """A str Enum of `names` for typer: every CLI choice list comes from its registry's names."""
    return Enum(name, {n: n for n in names}, type=str)  # type: ignore[return-value]


Device = choices("Device", DEVICES)
Decode = choices("Decode", DECODE_MODES)
DECODE = typer.Option(
    Decode.auto,
    "--decode",
    help="The hf engine's decode loop: dynamic (rows leave as they end), static (a fixed-shape KV cache), "
    "compiled (static, its step under torch.compile: CUDA graphs); auto = compiled on CUDA, else dynamic.",
)


def eprint(*parts: object) -> None:
    print(*parts, file=sys.stderr)


def print_error(err: CliError) -> None:
    """The one line a user reads for a failure: `error: MESSAGE` on stderr."""
    eprint(f"error: {err}")


def read_text(path: Path) -> str:
    """A text file's content, or a `CliError` that says in one line why it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise fail(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise fail(f"cannot read {path}: it is a directory") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise fail(f"cannot read {path}: not UTF-8 text (byte 0x{byte:02x} at offset {exc.start})") from None
    except OSError as exc:
        raise fail(f"cannot read {path}: {exc.strerror or exc}") from None
    if "\x00" in text:
        raise fail(f"cannot read {path}: a binary file (it holds NUL bytes), not text")
    return text
