"""`srpo-dsl sweep`: paired experiments, one `train` run per (cell, seed), and their results.

Light to import: the runs are subprocesses; numpy and matplotlib load only for the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from srpo_dsl.cli.common import EXIT_INPUT, SET, CliError, eprint, interrupted, parse_settings
from srpo_dsl.cli.train_cmds import parse_options
from srpo_dsl.console import note, quiet
from srpo_dsl.outputs import refuse_existing
from srpo_dsl.runlock import check_free, owning

if TYPE_CHECKING:
    from srpo_dsl.sweep.experiment import Experiment
    from srpo_dsl.sweep.runner import Job, Sweep

EXPERIMENT = typer.Argument(None, help="An experiment file (TOML; see docs/training.md).", show_default=False)
OUT = typer.Option(None, "--out", help="The sweep folder (runs, logs, state, results).")
JOBS = typer.Option(1, "--jobs", "-j", min=1, help="Runs at a time (each a `train` subprocess).")
REPORT = typer.Option(None, "--report", help="Rebuild DIR's results from what is on disk, run nothing.")
OPTION = typer.Option(
    [], "--option", help="A `train with` option of every cell, NAME=VALUE (wins over the cell's); repeatable."
)
MODEL = typer.Option(None, "--model", help="Every policy's model in every cell (e.g. builtin:tiny).")
SEEDS = typer.Option(None, "--seeds", help="The seeds in place of the experiment's, comma-separated.")
PROCS = typer.Option(
    1,
    "--procs-per-run",
    min=1,
    help="Processes (GPUs) per run: > 1 launches each run with torchrun, on its own GPUs.",
)
EVAL_DATA = typer.Option(
    [], "--eval-data", help="A held-out data file in place of the experiment's [eval] datasets; repeatable."
)


def sweep_cmd(
    experiment: Path | None = EXPERIMENT,
    out: Path | None = OUT,
    jobs: int = JOBS,
    report: Path | None = REPORT,
    setting: list[str] = SET,
    option: list[str] = OPTION,
    model: str | None = MODEL,
    seeds: str | None = SEEDS,
    eval_data: list[Path] = EVAL_DATA,
    procs_per_run: int = PROCS,
) -> None:
    """Run an experiment: every cell (workflow + overrides) once per seed, then its results.

    Each run is an ordinary `srpo-dsl train` run in OUT/cells/CELL/seed-S. Running the same
    command again skips finished runs and resumes the others from their checkpoints. A failed
    run is recorded (exit code, error line) and the others go on. Writes OUT/results.md,
    results.csv, results.json, curves.png and dynamics.png: held-out Avg@k / Pass@k per cell
    (mean ± std over seeds), each cell's paired difference to the baseline with a 95% bootstrap
    interval, and how each cell trained (return, gradient norm and its CV, length, mean K, clip
    fraction per event type). Exits 1 when a run failed.

    Examples:

      srpo-dsl sweep experiments/toy_ablation.toml --out runs/ablation --jobs 2

      srpo-dsl sweep --report runs/ablation

      srpo-dsl sweep experiments/paper_math.toml --out runs/c --model builtin:tiny --seeds 1 --option steps=2

      srpo-dsl sweep experiments/paper_math.toml --out runs/m --eval-data aime24.jsonl --eval-data amc23.jsonl
    """
    if report is not None:
        if experiment is not None or out is not None:
            raise CliError("--report DIR rebuilds the results of DIR: give no EXPERIMENT or --out with it")
        print_written(report_files(report))
        return
    if experiment is None or out is None:
        raise CliError("give an EXPERIMENT file and --out DIR (or --report DIR)")
    changes = Changes(parse_options(option), model, parse_seeds(seeds), list(eval_data) or None)
    try:
        failed = run_sweep(experiment, out, jobs, parse_settings(setting), changes, procs_per_run)
    except KeyboardInterrupt:
        raise interrupted(f"interrupted: the same command goes on with {out}'s unfinished runs") from None
    if failed:
        raise typer.Exit(EXIT_INPUT)


@dataclass(frozen=True)
class Changes:
    """What the command line changes in every cell: `train` options, model, seeds, held-out data."""

    options: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    seeds: list[int] | None = None
    datasets: list[Path] | None = None


def parse_seeds(value: str | None) -> list[int] | None:
    """`--seeds 1,2,3` as [1, 2, 3]; one line for anything else."""
    if value is None:
        return None
    try:
        seeds = [int(s) for s in value.split(",")]
    except ValueError:
        raise CliError(f"--seeds {value}: expected integers separated by commas, e.g. 1,2,3") from None
    if len(set(seeds)) != len(seeds):
        raise CliError(f"--seeds {value}: a seed is given twice")
    return seeds


def run_sweep(
    experiment: Path,
    out: Path,
    jobs: int,
    settings: dict[str, str],
    changes: Changes = Changes(),
    procs: int = 1,
) -> int:
    """Check everything, run what is left with a live view, write the results; the number of failed runs.
    `settings`: `--set` tool options, checked (and each tool's server asked) before any run starts;
    `changes`: the command line's options, model, seeds and held-out data for every cell; `procs`:
    processes (GPUs) per run."""
    from srpo_dsl.sweep.experiment import ExperimentError, load_experiment, overridden, workflow_errors
    from srpo_dsl.sweep.progress import summary
    from srpo_dsl.sweep.runner import Sweep, device_slots
    from srpo_dsl.sweep.state import STATE, open_state

    try:
        device_slots(jobs, procs)
    except ValueError as exc:
        raise CliError(f"--jobs {jobs} --procs-per-run {procs}: {exc}") from None

    check_free(out)  # another sweep goes on in it
    if not (out / STATE).is_file():  # a sweep's folder is its own: new, or the one it goes on with
        refuse_existing(out, "it holds no sweep to go on with; choose another --out")
    with owning(out):  # the sweep writes its folder alone; each run's folder is its train's
        try:
            exp = overridden(
                load_experiment(experiment), changes.options, changes.model, changes.seeds, changes.datasets
            )
            problems = workflow_errors(exp)
            if problems:  # as `srpo-dsl validate` shows them: position, source line, hint
                eprint("\n\n".join(problems))
                raise CliError(
                    f"{len(problems)} error(s) in the experiment's workflows: no run started", EXIT_INPUT
                )
            checked_tools(exp, settings)
            state = open_state(out, exp)
        except ExperimentError as err:
            if err.positioned:  # already `FILE:LINE:COL: error: ...`, as the DSL's diagnostics
                eprint(err.lines[0])
                raise typer.Exit(EXIT_INPUT) from None
            raise CliError(err.lines[0], EXIT_INPUT) from None
        except OSError as exc:
            raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
        sweep = Sweep(exp, out, state, jobs, settings, procs)
        todo = sweep.todo()
        watched(sweep, todo)
        print(f"{len(state.runs)} runs: {summary(state)}")
        print_written(report_files(out))
        return state.counts()["failed"]


def checked_tools(exp: Experiment, settings: dict[str, str]) -> None:
    """The settings name tool options of every workflow of the experiment, and each tool that can be asked
    answers (a retrieval server), before any run starts: else one line, exit 2."""
    from srpo_dsl.api import load
    from srpo_dsl.api.rollouts import check_tools

    for path in dict.fromkeys(c.workflow for c in exp.cells):
        check_tools(load(path, settings))


def watched(sweep: Sweep, todo: list[Job]) -> None:
    """Run `todo` with a live table on a terminal, or a line per change of the counts in a log (the table
    at the end); nothing under --quiet."""
    from rich.console import Console
    from rich.live import Live

    from srpo_dsl.sweep.progress import summary, view

    console, state = Console(stderr=True), sweep.state
    if quiet():
        sweep.run(todo)
        return
    if console.is_terminal:
        with Live(view(state), console=console, refresh_per_second=2) as live:
            sweep.on_change = lambda: live.update(view(state))
            sweep.run(todo)
        return
    shown = [""]

    def line() -> None:
        if summary(state) != shown[0]:
            shown[0] = summary(state)
            note(f"sweep: {shown[0]}")

    sweep.on_change = line
    sweep.run(todo)
    console.print(view(state))


def report_files(folder: Path) -> list[Path]:
    from srpo_dsl.sweep.report import write_report

    try:
        return write_report(folder)
    except (ValueError, KeyError, OSError) as exc:
        raise CliError(
            f"cannot report {folder}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            EXIT_INPUT,
        ) from None


def print_written(paths: list[Path]) -> None:
    print("-> " + ", ".join(str(p) for p in paths))
