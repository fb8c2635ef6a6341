"""Shared CLI plumbing: the choices and options several commands share, and how a failure is shown.

Failures are `srpo_dsl.errors.SrpoDslError`s, raised by the API (`srpo_dsl.api`) or here (`CliError`, a
command-line argument that cannot be used); `main` prints each as one line and exits with its code."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from enum import Enum

import typer

import srpo_dsl.console as console
from srpo_dsl.choices import DECODE_MODES
from srpo_dsl.data_sources import supported
from srpo_dsl.devices import DEVICES
from srpo_dsl.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, SrpoDslError

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C

__all__ = ["EXIT_INPUT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_USAGE", "CliError", "fail", "print_error"]


class CliError(SrpoDslError):
    """A command-line failure: printed as one line, exits with `code`. `shown`: what stderr shows in its
    place (several lines, e.g. a sweep's failed cells)."""

    def __init__(self, message: str, code: int = EXIT_USAGE, shown: str | None = None):
        super().__init__(message)
        self.exit_code = code
        self.shown = shown


def fail(message: str, code: int = EXIT_USAGE) -> CliError:
    return CliError(message, code)


def interrupted(message: str = "interrupted", code: int = EXIT_INTERRUPTED) -> CliError:
    """A Ctrl-C (or SIGTERM, SIGHUP: `code` 128 + N): `message` on stderr, once (under a launcher every
    rank gets the signal: rank 0 says it), exit `code`."""
    return CliError(message, code, shown=message if os.environ.get("RANK", "0") == "0" else "")


def choices(name: str, names: Iterable[str]) -> type[Enum]:
    """A str Enum of `names` for typer: every CLI choice list comes from its registry's names."""
    return Enum(name, {n: n for n in names}, type=str)  # type: ignore[return-value]


Device = choices("Device", DEVICES)
Decode = choices("Decode", DECODE_MODES)
# what a `--data` / `--eval-data` option takes, in its help
SOURCES = (
    f"a {supported()} file, a `save_to_disk` folder, or hf:NAME (a name in the local `datasets` cache, "
    "or a local folder of data files, read offline; its split is the task's `split`, or `eval_split` "
    "in an evaluation)"
)

DECODE = typer.Option(
    Decode.auto,
    "--decode",
    help="The hf engine's decode loop: dynamic (rows leave as they end), static (a fixed-shape KV cache), "
    "compiled (static, its step under torch.compile: CUDA graphs); auto = compiled on CUDA, else dynamic.",
)
OVERWRITE = typer.Option(  # the results-folder rule itself: `srpo_dsl.outputs`
    False, "--overwrite", help="Replace the --out folder if it exists (once the new results are complete)."
)
QUIET = typer.Option(
    False, "--quiet", "-q", help="Print only errors on stderr (the command's results still go to stdout)."
)
VERBOSE = typer.Option(
    False, "--verbose", "-v", help="Also show the libraries' logs, warnings, progress bars and build output."
)
SET = typer.Option(
    [],
    "--set",
    help="A tool option in place of the workflow file's: tool.NAME.OPTION=VALUE "
    "(e.g. tool.search.url=http://HOST:PORT/retrieve); repeatable.",
)


def parse_settings(values: list[str]) -> dict[str, str]:
    """`--set tool.NAME.OPTION=VALUE` pairs as {key: value} (the API checks names and values)."""
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set {v}: expected tool.NAME.OPTION=VALUE, e.g. tool.search.url=URL")
        out[key.strip()] = value.strip()
    return out


def eprint(*parts: object) -> None:
    print(*parts, file=sys.stderr)


def print_error(err: SrpoDslError) -> None:
    """What a user reads for a failure, on stderr: a workflow's errors as `validate` renders them
    (position, source line, caret, hint), a message shown in full, or `error: MESSAGE`."""
    render = getattr(err, "render", None)
    shown = render() if callable(render) else getattr(err, "shown", None)
    if shown != "":  # "": said elsewhere (another rank)
        eprint(shown if shown is not None else f"error: {err}")


def output_options(command: Callable[..., object]) -> Callable[..., object]:
    """`command` with --quiet and --verbose, the same in every command: they set the process's level
    (`srpo_dsl.console`) before it runs, and a command that takes `verbose` gets it."""
    signature = inspect.signature(command)
    takes_verbose = "verbose" in signature.parameters

    @functools.wraps(command)
    def with_level(*args: object, quiet: bool, verbose: bool, **kwargs: object) -> object:
        if quiet and verbose:
            raise CliError("--quiet and --verbose: give one of them")
        console.set_level(console.QUIET if quiet else console.VERBOSE if verbose else console.NORMAL)
        try:
            return command(*args, **kwargs, **({"verbose": verbose} if takes_verbose else {}))
        except KeyboardInterrupt:  # else typer turns it into a silent exit 130
            raise interrupted() from None

    own = [p for name, p in signature.parameters.items() if name != "verbose"]
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=bool)
        for name, default in (("quiet", QUIET), ("verbose", VERBOSE))
    ]
    with_level.__signature__ = signature.replace(parameters=[*own, *options])  # type: ignore[attr-defined]
    with_level.__annotations__ = {**command.__annotations__, "quiet": bool, "verbose": bool}
    return with_level
