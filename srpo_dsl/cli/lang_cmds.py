"""`srpo-dsl validate`, `srpo-dsl compile` and `srpo-dsl fmt`: light imports only (no torch)."""

from __future__ import annotations

import difflib
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from srpo_dsl.api.quiet import libraries_quiet
from srpo_dsl.cli.common import EXIT_INPUT, EXIT_USAGE, choices, eprint, print_error
from srpo_dsl.console import note
from srpo_dsl.errors import UsageError
from srpo_dsl.io import check_output_file, not_a_file, read_text, write_atomic
from srpo_dsl.lang.compile.graph_formats import FORMATS

if TYPE_CHECKING:
    from srpo_dsl.lang.compile.graph import EventGraph


class Format(str, Enum):
    pretty = "pretty"
    json = "json"
    github = "github"


Emit = choices("Emit", FORMATS)


def validate(
    files: list[Path] = typer.Argument(..., help="Workflow files (*.srpo).", show_default=False),
    fmt: Format = typer.Option(Format.pretty, "--format", "-f", help="pretty | json | github."),
) -> None:
    """Check workflows; print positioned diagnostics.

    Exit 0 when every file is well formed, 1 when one has errors, 2 on usage or I/O errors.

    Examples:

      srpo-dsl validate workflows/*.srpo

      srpo-dsl validate my.srpo --format github   # annotations in GitHub Actions
    """
    from srpo_dsl.lang import analyze
    from srpo_dsl.lang.syntax.messages import render_all, render_github, render_json

    diags, unreadable, has_error = [], 0, False
    for path in files:
        try:
            text = read_text(path)
        except UsageError as err:  # reported here, in file order, and nowhere else
            print_error(err)
            unreadable += 1
            continue
        result = analyze(text, str(path))
        has_error |= not result.ok
        diags.extend(result.diagnostics)
        if fmt is Format.pretty:
            for shown in render_all(result.diagnostics, text):
                print(shown + "\n")
        elif fmt is Format.github:
            for d in result.diagnostics:
                print(render_github(d))
    if fmt is Format.json:
        print(render_json(diags))
    elif fmt is Format.pretty:
        n_err = sum(d.severity == "error" for d in diags)
        n_warn = len(diags) - n_err
        not_read = f", {unreadable} unreadable" if unreadable else ""
        note(f"{len(files)} file(s) checked: {n_err} error(s), {n_warn} warning(s){not_read}")
    if unreadable:
        raise typer.Exit(EXIT_USAGE)
    if has_error:
        raise typer.Exit(EXIT_INPUT)


def fmt_cmd(
    files: list[Path] = typer.Argument(..., help="Workflow files (*.srpo).", show_default=False),
    check: bool = typer.Option(False, "--check", help="Write nothing; list the files that would change."),
    diff: bool = typer.Option(False, "--diff", help="Write nothing; print a unified diff of the changes."),
) -> None:
    """Rewrite workflows in the canonical layout (docs/dsl.md, "Formatting"); their meaning never changes.

    Exit 0 when done (or, with --check, when no file would change), 1 when a file has syntax errors
    (it is left as it is) or, with --check, would change, 2 on usage or I/O errors.

    Examples:

      srpo-dsl fmt workflows/*.srpo

      srpo-dsl fmt my.srpo --check --diff   # in CI: show what would change, fail if anything would
    """
    texts = {}
    for path in files:
        try:
            texts[path] = rewritable_text(path)
        except UsageError as err:
            print_error(err)
    if len(texts) < len(files):  # every file is read before any is written: a missing one writes nothing
        raise typer.Exit(EXIT_USAGE)
    changed, unchanged, invalid = 0, 0, 0
    for path, text in texts.items():
        formatted = _formatted(path, text)
        if formatted is None:
            invalid += 1
        elif formatted == text:
            unchanged += 1
        else:
            changed += 1
            _apply(path, text, formatted, check, diff)
    verb = "would be formatted" if check or diff else "formatted"
    (note if check or diff else print)(f"{changed} file(s) {verb}, {unchanged} unchanged")
    if invalid or (check and changed):
        raise typer.Exit(EXIT_INPUT)


def rewritable_text(path: Path) -> str:
    """The text of a workflow `fmt` may rewrite: a regular file (a link's target: it stays a link), read as
    it is (line endings are kept: `format_source`). A FIFO, device or socket is refused before it is
    opened: reading a FIFO would wait for a writer, and no such file can be rewritten."""
    problem = not_a_file(path)
    if problem is not None and path.exists() and not path.is_dir():
        raise UsageError(f"cannot read {path}: {problem}")
    return read_text(path, newline="")


def _formatted(path: Path, text: str) -> str | None:
    """The file in the canonical layout, or None after printing its syntax errors as `validate` does."""
    from srpo_dsl.lang.syntax.messages import SrpoError, render_all
    from srpo_dsl.lang.tooling.format import format_source

    try:
        return format_source(text, str(path))
    except SrpoError as err:
        for shown in render_all(err.diagnostics, text):
            eprint(shown + "\n")
        return None


def _apply(path: Path, text: str, formatted: str, check: bool, diff: bool) -> None:
    """A file that changes: listed (--check), shown (--diff), else rewritten atomically."""
    if check:
        print(f"would reformat {path}")
    if diff:
        lines = difflib.unified_diff(
            text.splitlines(keepends=True), formatted.splitlines(keepends=True), str(path), str(path)
        )
        print("".join(lines), end="")
    if check or diff:
        return
    write_atomic(path, formatted, newline="")  # a disk that refuses it: a `WriteError` line


def compile_cmd(
    file: Path = typer.Argument(..., help="A workflow file (*.srpo).", show_default=False),
    emit: Emit = typer.Option(
        Emit.mermaid, "--emit", "-e", help="json (node-link) | mermaid | dot | graphml."
    ),
    out: Path | None = typer.Option(None, "--output", "-o", help="Write the graph here instead of stdout."),
    verbose: bool = False,
) -> None:
    """Compile a workflow into its event graph and report static cost bounds per episode.

    Examples:

      srpo-dsl compile workflows/math_routed.srpo --emit mermaid

      srpo-dsl compile workflows/math_routed.srpo --emit json -o g.json
    """
    from srpo_dsl.lang import analyze
    from srpo_dsl.lang.compile.graph_formats import export
    from srpo_dsl.lang.syntax.messages import render_all

    if out is not None:  # before anything is read: a device, FIFO or link is refused
        check_output_file(out, follow_links=False)
    text = read_text(file)
    result = analyze(text, str(file))
    for d, shown in zip(result.diagnostics, render_all(result.diagnostics, text)):
        (eprint if d.severity == "error" else note)(shown + "\n")  # a warning is a note: not under --quiet
    program = result.program
    if program is None:
        raise typer.Exit(EXIT_INPUT)
    rendered = export(result.graph, emit.value)
    bounds = program.bounds
    summary = (
        f"{program.name}: {len(program.event_nodes)} event steps, hash {program.hash}; per episode at most "
        f"{bounds.events} events, {bounds.calls} model calls, {bounds.tool_calls} tool calls, "
        f"{bounds.tokens} generated tokens"
        + (f", {bounds.paths} paths (tree branches)" if bounds.paths > 1 else "")
    )
    with libraries_quiet(not verbose):  # an adapter's size is read off its base's config by transformers
        adapters = adapter_report(program)
    summary = "\n".join([summary, *adapters])
    if out is None:
        print(rendered, end="")
        note(summary)
    else:
        write_atomic(out, rendered)  # a disk that refuses it: a `WriteError` line
        print(summary)
        print(f"wrote {emit.value} graph to {out}")


def adapter_report(graph: EventGraph) -> list[str]:
    """A line per adapter: its base, its roles, its LoRA options and trainable parameter count (read off
    the base's config on the meta device: no weights; "unknown" when the config is not on this machine)."""
    from srpo_dsl.api.workflow import adapter_sizes

    lines = []
    for base in dict.fromkeys(p.base for p in graph.policies.values() if p.base is not None):
        counts = adapter_sizes(graph, base)
        for name, p in graph.policies.items():
            if p.base != base:
                continue
            roles = [a.name for a in graph.agents.values() if a.policy == name] or ["none"]
            lora = p.lora or {}
            size = counts.get(graph.adapters[name])
            shown = f"{size:,} trainable parameters" if size is not None else "parameters unknown"
            lines.append(
                f"adapter {name} on {base} (r {lora['r']}, alpha {lora['alpha']}, {lora['targets']}): "
                f"roles {', '.join(roles)}; {shown}"
            )
    return lines
