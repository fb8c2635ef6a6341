"""The `srpo-dsl` command line. Each command imports its heavy dependencies lazily."""

from __future__ import annotations

import signal
import sys
import traceback
from pathlib import Path

import typer

from srpo_dsl.api.launch import LAUNCHED
from srpo_dsl.cli.common import EXIT_INPUT, EXIT_INTERNAL, eprint, output_options, print_error
from srpo_dsl.cli.lang_cmds import compile_cmd, fmt_cmd, validate
from srpo_dsl.cli.lsp_cmd import lsp_cmd
from srpo_dsl.cli.run_cmds import audit, eval_cmd, render, run
from srpo_dsl.cli.stdout import EXIT_PIPE_CLOSED, end_quietly, flushed, stdout_closed
from srpo_dsl.cli.sweep_cmds import sweep_cmd
from srpo_dsl.cli.train_cmds import export_cmd, launched_cmd, plot_cmd, train_cmd
from srpo_dsl.cli.view_cmds import view
from srpo_dsl.cli.watch import ended, watched
from srpo_dsl.errors import SrpoDslError
from srpo_dsl.stopping import STOPS, Stopped, stopped_by
from srpo_dsl.version import __version__

app = typer.Typer(
    name="srpo-dsl",
    help="Multi-agent LLM workflows as text: validate, compile, run, evaluate and train them with SRPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
COMMANDS = {  # the one list of the commands: each takes --quiet and --verbose (`output_options`)
    "validate": validate,
    "compile": compile_cmd,
    "fmt": fmt_cmd,
    "lsp": lsp_cmd,
    "render": render,
    "run": run,
    "eval": eval_cmd,
    "audit": audit,
    "view": view,
    "train": train_cmd,
    "plot": plot_cmd,
    "export": export_cmd,
    "sweep": sweep_cmd,
}
for _name, _command in COMMANDS.items():
    app.command(_name)(output_options(_command))
app.command(LAUNCHED, hidden=True)(output_options(launched_cmd))  # each process of a launch (`api.launch`)


def _version(value: bool) -> None:
    if value:
        print(f"srpo-dsl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    local_rank: int = typer.Option(
        -1,
        "--local_rank",
        "--local-rank",
        hidden=True,
        help="Set by the `deepspeed` launcher (before the command); the LOCAL_RANK variable is what is used.",
    ),
) -> None:
    """Multi-agent LLM workflows as text: validate, compile, run, evaluate and train them with SRPO."""


INTERRUPTS: list[int] = []  # the SIGINTs this process received (`note_interrupt`)


def note_interrupt(signum: int, frame: object) -> None:
    """Python's Ctrl-C, remembered: one that lands in a library's import can come out as another error
    (transformers turns it into a ModuleNotFoundError), which is still an interrupt, not a bug."""
    INTERRUPTS.append(signum)
    signal.default_int_handler(signum, frame)


def interrupted_exit() -> None:
    """After a Ctrl-C (or a SIGTERM, SIGHUP: `srpo_dsl.stopping`), whatever error it caused is the
    interrupt: one line, exit 128 + N."""
    if INTERRUPTS or STOPS:
        how, code = stopped_by(KeyboardInterrupt() if INTERRUPTS else Stopped(STOPS[0]))
        eprint(how)
        sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one clear line and a non-zero exit for every failure, never a traceback; a stdout
    closed by its reader (`srpo-dsl ... | head`) ends it quietly, exit 141 (`cli.stdout`). From the command
    line, a command that runs user code is carried out by a watched child process (`cli.watch`)."""
    if argv is None and (code := watched(sys.argv[1:])) is not None:
        sys.exit(code)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, note_interrupt)
    INTERRUPTS.clear()  # this command's signals only (a caller may run several in one process)
    STOPS.clear()
    try:
        code = outcome(argv)
    finally:  # also when srpo-dsl's own SystemExit (a signal's exit code) passes through
        complete = flushed()
        ended()  # not reached after an os._exit: its watcher or launcher tells
    sys.exit(code or (0 if complete else EXIT_PIPE_CLOSED))  # a failure keeps its own code


def outcome(argv: list[str] | None) -> int:
    """The command's exit code; every failure said in one line on stderr."""
    try:
        code = app(args=argv, standalone_mode=False)  # returns the exit code of a `typer.Exit`
    except SystemExit as exc:
        if stdout_closed(exc):  # typer's and rich's exit for a BrokenPipeError
            return end_quietly()
        if (where := foreign_exit(exc)) is None:
            raise
        eprint(f"error: {where}: SystemExit({exc.code!r}) raised there would end the command")
        return EXIT_INPUT
    except SrpoDslError as err:  # the API's and the CLI's: a workflow's errors, the user's file:line, ...
        if err.exit_code < 128:  # an error, not a signal's end: one a signal caused is the signal's
            interrupted_exit()
        print_error(err)
        return err.exit_code
    except typer.Exit as ex:
        return ex.exit_code
    except KeyboardInterrupt:
        eprint("interrupted")
        return 130
    except Exception as exc:
        return unexpected(exc)
    return code if isinstance(code, int) else 0


def unexpected(exc: Exception) -> int:
    """A closed stdout, a usage error of click, an abort, or a bug: its line, and the exit code."""
    if stdout_closed(exc):
        return end_quietly()
    interrupted_exit()
    if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
        exc.show()  # a usage error of click (as vendored by typer): exit code 2
        return exc.exit_code
    if type(exc).__name__ == "Abort":
        eprint("aborted")
        return 130
    eprint(f"internal error (a bug, please report it): {type(exc).__name__}: {exc}")
    return EXIT_INTERNAL


def foreign_exit(exc: SystemExit) -> str | None:
    """`FILE:LINE` of the code outside srpo-dsl that raised `exc` (a plugin's; the user's own Python is
    reported sooner, by `runtime.usercode`), or None when srpo-dsl raised it (a signal's exit code)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or Path(frames[-1].filename).resolve().is_relative_to(Path(__file__).parents[1]):
        return None
    return f"{frames[-1].filename}:{frames[-1].lineno}"
