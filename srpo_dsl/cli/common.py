"""Shared CLI plumbing: exit codes, one-line errors, checks made before anything loads, and the one rule
for the libraries' output (atomic writes come from `srpo_dsl.io`; results folders from `cli.outputs`)."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, redirect_stdout, suppress
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from srpo_dsl.backends import DECODE_MODES
from srpo_dsl.rl.names import DEVICES

if TYPE_CHECKING:
    from srpo_dsl.lang.errors import SrpoError

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

QUIET_ENV = {  # read by the libraries when they are imported
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights", "Writing model shards"
}
LIBRARIES = (
    r"(torch|transformers|deepspeed|accelerate|huggingface_hub|peft|safetensors|tokenizers|srpo_dsl)(\.|$)"
)


class CliError(Exception):
    """A user-facing failure: printed as one line, exits with `code`. `shown`: what stderr shows in its
    place (a workflow's errors as `validate` renders them: position, source line, caret, hint)."""

    def __init__(self, message: str, code: int = EXIT_USAGE, shown: str | None = None):
        super().__init__(message)
        self.code = code
        self.shown = shown


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
VERBOSE = typer.Option(False, "--verbose", "-v", help="Show the libraries' logs, warnings and progress bars.")


def eprint(*parts: object) -> None:
    print(*parts, file=sys.stderr)


def print_error(err: CliError) -> None:
    """The one line a user reads for a failure, on stderr: `error: MESSAGE`, or the error as shown."""
    eprint(err.shown if err.shown is not None else f"error: {err}")


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


def workflow_failure(err: SrpoError, workflow: Path) -> CliError:
    """A workflow that does not compile, for a command that runs it (exit 1): its first error is the
    message (`FILE:LINE:COL: error[CODE]: ...`); stderr shows every error as `validate` does."""
    from srpo_dsl.lang.errors import render_pretty

    try:
        source: str | None = read_text(workflow)
    except CliError:
        source = None
    errors = [d for d in err.diagnostics if d.severity == "error"] or err.diagnostics
    first = errors[0]
    message = f"{first.span}: {first.severity}[{first.code}]: {first.message}"
    return CliError(message, EXIT_INPUT, "\n\n".join(render_pretty(d, source) for d in errors))


def check_device(device: str | None) -> None:
    """`--device cuda` on a machine without a CUDA device: a usage error, before anything loads."""
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise fail("--device cuda: no CUDA device is available (use --device cpu)")


def check_files(paths: Iterable[Path | None]) -> None:
    """Every input file the command was given exists (`None`: not given)."""
    for path in paths:
        if path is not None and not path.is_file():
            raise fail(f"cannot read {path}: {'it is a directory' if path.is_dir() else 'no such file'}")


@contextmanager
def libraries_quiet(enabled: bool) -> Iterator[None]:
    """Hide the libraries' progress bars, INFO/WARNING logs, warnings and stdout for the block.

    The one rule of every command that loads them (`run`, `eval`, `train`, `export`, `compile`):
    hidden unless `--verbose`. stdout is silenced at the file-descriptor level too, so lines that
    compiled extensions print (DeepSpeed's CPU Adam) are hidden as well; srpo-dsl reports on
    stderr meanwhile, and prints its results after the block.
    """
    if not enabled:
        yield
        return
    unset = [key for key in QUIET_ENV if key not in os.environ]  # a value the user set wins
    os.environ.update({key: QUIET_ENV[key] for key in unset})
    previous_disable = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), stdout_silenced():
            warnings.filterwarnings("ignore", module=LIBRARIES)
            yield
    finally:
        logging.disable(previous_disable)
        for key in unset:
            del os.environ[key]


@contextmanager
def stdout_silenced() -> Iterator[None]:
    """sys.stdout and file descriptor 1 go to the null device for the block (C buffers flushed first)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null, redirect_stdout(null):
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            _flush_c_stdio()
            os.dup2(saved, 1)
            os.close(saved)


def _flush_c_stdio() -> None:
    """fflush(NULL): what C code buffered while stdout was silenced is dropped now, not printed later."""
    import ctypes

    with suppress(OSError, AttributeError):  # no C library to reach (not Linux or macOS)
        ctypes.CDLL(None).fflush(None)
