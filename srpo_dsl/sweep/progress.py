"""The live view of a sweep (stderr): counts of runs done, running, failed, pending, and each run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from srpo_dsl.sweep.state import SweepState

if TYPE_CHECKING:
    from rich.table import Table

COLOURS = {"pending": "dim", "running": "yellow", "done": "green", "failed": "red"}


def summary(state: SweepState) -> str:
    return ", ".join(f"{n} {status}" for status, n in state.counts().items())


def view(state: SweepState) -> Table:
    """A table of every run: status, attempts, wall time, and the error of a failed one."""
    from rich.table import Table

    table = Table(title=f"sweep: {summary(state)}", title_justify="left", expand=False)
    for column in ("run", "status", "attempts", "wall s", "error"):
        table.add_column(column, justify="right" if column in ("attempts", "wall s") else "left")
    for key, run in state.runs.items():
        status = f"[{COLOURS[run.status]}]{run.status}[/]"
        table.add_row(key, status, str(run.attempts), f"{run.wall_s:.0f}", run.error or "")
    return table
