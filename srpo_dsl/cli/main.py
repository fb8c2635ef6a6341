"""The `srpo-dsl` command line. Each command imports its heavy dependencies lazily."""

from __future__ import annotations

import signal
import sys
import traceback
from pathlib import Path

import typer

from srpo_dsl.cli.common import EXIT_INPUT, EXIT_INTERNAL, eprint, output_options, print_error
from srpo_dsl.cli.lang_cmds import compile_cmd, fmt_cmd, validate
from srpo_dsl.cli.lsp_cmd import lsp_cmd
from srpo_dsl.cli.run_cmds import audit, eval_cmd, render, run
from srpo_dsl.cli.sweep_cmds import sweep_cmd
from srpo_dsl.cli.train_cmds import export_cmd, plot_cmd, train_cmd
from srpo_dsl.cli.view_cmds import view
from srpo_dsl.errors import SrpoDslError
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
    """After a Ctrl-C, whatever error it caused is the interrupt: one line, exit 130."""
    if INTERRUPTS:
        eprint("interrupted")
        sys.exit(130)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one clear line and a non-zero exit for every failure, never a traceback."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, note_interrupt)
    try:
        code = app(args=argv, standalone_mode=False)  # returns the exit code of a `typer.Exit`
    except SystemExit as exc:
        if (where := foreign_exit(exc)) is None:
            raise
        eprint(f"error: {where}: SystemExit({exc.code!r}) raised there would end the command")
        sys.exit(EXIT_INPUT)
    except SrpoDslError as err:  # the API's and the CLI's: a workflow's errors, the user's file:line, ...
        if err.exit_code != 130:
            interrupted_exit()
        print_error(err)
        sys.exit(err.exit_code)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except KeyboardInterrupt:
        eprint("interrupted")
        sys.exit(130)
    except Exception as exc:
        interrupted_exit()
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()  # a usage error of click (as vendored by typer): exit code 2
            sys.exit(exc.exit_code)
        if type(exc).__name__ == "Abort":
            eprint("aborted")
            sys.exit(130)
        eprint(f"internal error (a bug, please report it): {type(exc).__name__}: {exc}")
        sys.exit(EXIT_INTERNAL)
    sys.exit(code if isinstance(code, int) else 0)


def foreign_exit(exc: SystemExit) -> str | None:
    """`FILE:LINE` of the code outside srpo-dsl that raised `exc` (a plugin's; the user's own Python is
    reported sooner, by `runtime.usercode`), or None when srpo-dsl raised it (a signal's exit code)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or Path(frames[-1].filename).resolve().is_relative_to(Path(__file__).parents[1]):
        return None
    return f"{frames[-1].filename}:{frames[-1].lineno}"
