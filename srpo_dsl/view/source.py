"""What `srpo-dsl view` reads: a run folder (a `run`, `eval` or `train` output) or a traces file.

The traces are required; the event graph comes from `--workflow`, else the run's graph.json,
else the workflow named in its config.json; a training run adds its metrics.jsonl and
eval.jsonl (read by `srpo_dsl.runfolder`). A file cut by a killed writer is read up to its last
complete line, with a note.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from srpo_dsl.jsonvalue import JsonObject
from srpo_dsl.runfolder import EVAL, GRAPH, METRICS, TRACES, RunError, read_config, read_jsonl
from srpo_dsl.runtime.traces import TraceEpisode, TraceError, read_partial_traces

if TYPE_CHECKING:
    import networkx as nx


class ViewError(Exception):
    """Input the viewer cannot show; the message is one line."""


@dataclass(frozen=True)
class Source:
    traces: Path
    episodes: list[TraceEpisode]
    graph: nx.DiGraph | None
    config: JsonObject | None
    metrics: list[JsonObject]
    evals: list[JsonObject]
    notes: list[str]  # what the page says about its input: cut files, a missing graph


def load_source(path: Path, workflow: Path | None = None) -> Source:
    """Read everything the page shows; `ViewError` for a missing or unreadable traces file."""
    if not path.exists():
        raise ViewError(f"cannot read {path}: no such file or folder")
    traces = path / TRACES if path.is_dir() else path
    if not traces.is_file():
        raise ViewError(f"{path}: no {TRACES} in it (a training run writes it at its first checkpoint)")
    try:
        partial = read_partial_traces(traces)
    except TraceError as exc:
        raise ViewError(str(exc)) from None
    notes = []
    if partial.cut_line is not None:
        notes.append(
            f"{traces.name}: line {partial.cut_line} is unfinished (its writer was stopped); "
            f"showing the {len(partial.episodes)} complete episodes before it"
        )
    folder = traces.parent
    config = config_or_note(folder, notes)
    try:
        metrics, evals = read_jsonl(folder / METRICS, notes), read_jsonl(folder / EVAL, notes)
    except RunError as exc:
        raise ViewError(str(exc)) from None
    graph = find_graph(folder, config, workflow, partial.episodes, notes)
    return Source(traces, partial.episodes, graph, config, metrics, evals, notes)


def config_or_note(folder: Path, notes: list[str]) -> JsonObject | None:
    """The run's config.json, or None (with a note when it is there but unreadable)."""
    try:
        return read_config(folder)
    except RunError as exc:
        notes.append(f"{exc}: its settings are not shown")
        return None


def find_graph(
    folder: Path,
    config: JsonObject | None,
    workflow: Path | None,
    episodes: list[TraceEpisode],
    notes: list[str],
) -> nx.DiGraph | None:
    """The workflow's graph whose hash the traces carry, or None with a note saying why."""
    hashes = sorted({ep.graph_hash for ep in episodes})
    if len(hashes) > 1:
        notes.append(
            f"the traces come from {len(hashes)} workflow graphs ({', '.join(hashes)}); none is shown"
        )
        return None
    recorded = config.get("workflow") if config else None
    if workflow is not None:
        graph, origin = compile_graph(workflow), str(workflow)
    elif (folder / GRAPH).is_file():
        graph, origin = read_graph(folder / GRAPH), GRAPH
    elif isinstance(recorded, str) and recorded and Path(recorded).is_file():
        graph, origin = compile_graph(Path(recorded)), str(recorded)
    else:
        notes.append("no event graph recorded with these traces (pass --workflow FILE.srpo to show it)")
        return None
    if graph.graph.get("hash") != hashes[0]:
        notes.append(
            f"the graph of {origin} has hash {graph.graph.get('hash')}, the traces {hashes[0]}: not shown"
        )
        return None
    return graph


def read_graph(path: Path) -> nx.DiGraph:
    from srpo_dsl.lang.compile.graph_formats import from_json

    try:
        return from_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ViewError(f"{path}: not a node-link event graph ({type(exc).__name__})") from None


def compile_graph(workflow: Path) -> nx.DiGraph:
    from srpo_dsl.lang.analysis import load_graph
    from srpo_dsl.lang.syntax.messages import SrpoError

    if not workflow.is_file():
        raise ViewError(f"cannot read {workflow}: no such file")
    try:
        return load_graph(workflow).to_networkx()
    except SrpoError as err:
        first = err.diagnostics[0]
        raise ViewError(f"{first.span}: error[{first.code}]: {first.message}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ViewError(f"cannot read {workflow}: {type(exc).__name__}") from None
