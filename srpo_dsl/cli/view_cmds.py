"""`srpo-dsl view`: one self-contained HTML page of a run's traces, event graph and training curves."""

from __future__ import annotations

import gc
from pathlib import Path

import typer

from srpo_dsl.cli.common import EXIT_INPUT, CliError
from srpo_dsl.console import note
from srpo_dsl.io import check_output_file, write_atomic


def default_output(run: Path) -> Path:
    """RUN/view.html for a run folder; next to a traces file, with its name (traces.html)."""
    return run / "view.html" if run.is_dir() else run.with_suffix(".html")


def size_text(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"


def view(
    run: Path = typer.Argument(
        ..., help="A run folder (written by `run`, `eval` or `train`) or a traces.jsonl.", show_default=False
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="The HTML file to write (default: RUN/view.html, or TRACES.html)."
    ),
    workflow: Path | None = typer.Option(
        None, "--workflow", help="The workflow whose graph to show (default: the run's graph.json)."
    ),
) -> None:
    """Write one HTML file that opens offline: the event graph, the episodes (filterable), each
    episode's events with its members side by side, and a training run's curves.

    Examples:

      srpo-dsl view runs/q1

      srpo-dsl view runs/r1/traces.jsonl -o r1.html
    """
    from srpo_dsl.view.page import render_page
    from srpo_dsl.view.source import ViewError, load_source

    if not run.exists():
        raise CliError(f"cannot read {run}: no such file or folder")
    target = output or default_output(run)
    check_output_file(target, follow_links=False)  # before anything is read: a device, FIFO, link: refused
    gc.disable()  # many small acyclic objects (10,000 episodes): the cycle collector would double the time
    try:
        source = load_source(run, workflow)
        html = render_page(source, f"srpo-dsl view: {run}")
    except ViewError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
    finally:
        gc.enable()
    write_atomic(target, html)  # a disk that refuses it: a `WriteError` line
    for line in source.notes:
        note(f"note: {line}")
    events = sum(len(ep.events) for ep in source.episodes)
    size = len(html.encode("utf-8"))
    print(f"{target}: {size_text(size)} ({size} bytes), {len(source.episodes)} episodes, {events} events")
