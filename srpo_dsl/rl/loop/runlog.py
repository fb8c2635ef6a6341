"""A training run's folder, written by rank 0: its outputs (metrics.jsonl, eval.jsonl, traces, config, the
event graph; the trackers of `report_to`: TensorBoard's tb/, ...). The files' names and their readers are
the run folder's format (`srpo_dsl.runfolder`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from srpo_dsl.io import append_jsonl, write_atomic, write_json, write_lines_atomic, writing
from srpo_dsl.jsonvalue import JsonValue
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.lang.compile.graph_formats import to_mermaid
from srpo_dsl.rl.loop.all_invalid import AllInvalidWarning
from srpo_dsl.runfolder import (
    CONFIG,
    EVAL,
    EVAL_PROMPTS,
    GRAPH,
    MERMAID,
    METRICS,
    TRACES,
    RunError,
    as_float,
    read_jsonl,
)
from srpo_dsl.runtime.episode import Episode
from srpo_dsl.runtime.traces import EventUpdate, to_trace, write_graph, write_traces
from srpo_dsl.trackers.base import TrackedRun, run_identity, tracked_metrics
from srpo_dsl.trackers.fanout import IDS, Trackers, problem_of, warn
from srpo_dsl.trackers.tensorboard import FOLDER as TENSORBOARD


class RunLog:
    """Appends one row per step (and per evaluation), and reports each to the run's trackers (`report_to`);
    a resumed run first drops rows after its checkpoint. `plots` draws a run folder's PNGs and returns
    them (`plots.run_plots`; given by the loop, which is above this module): at the end of a run whose
    trackers keep files."""

    def __init__(
        self,
        out: Path,
        config: Mapping[str, JsonValue],
        start: int,
        graph: EventGraph,
        trackers: Sequence[str],
        plots: Callable[[Path], list[Path]] | None = None,
    ):
        with writing(out):
            out.mkdir(parents=True, exist_ok=True)
        write_json(out / CONFIG, config)
        write_graph(out, graph)
        for name in (METRICS, EVAL, EVAL_PROMPTS):
            truncate_jsonl(out / name, start if start else -1)
        self.out = out
        self.plots = plots
        self.graph_hash = graph.hash
        self.all_invalid = AllInvalidWarning()
        name, experiment = run_identity(out, graph.name)
        self.trackers = Trackers(trackers, TrackedRun(out, name, experiment, config, start, None))
        if self.trackers.keep_files:
            write_atomic(out / MERMAID, to_mermaid(graph.to_networkx()) + "\n")
            self.trackers.log_files([out / CONFIG, out / MERMAID], out)

    def step(
        self,
        row: Mapping[str, float],
        episodes: Sequence[Episode],
        updates: Mapping[str, EventUpdate] | None = None,
    ) -> None:
        """A training step's metrics; its rollouts, when given, replace OUT/traces.jsonl (with `updates`:
        event id -> what the update did with it)."""
        append_jsonl(self.out / METRICS, row)
        self.all_invalid.check(row, "training rollouts")
        if episodes:
            write_traces(self.out / TRACES, [to_trace(ep, self.graph_hash, updates) for ep in episodes])
        self.trackers.log(tracked_metrics(row, "train"), int(row["step"]))

    def evaluation(self, row: Mapping[str, Any], prompts: Mapping[str, Any]) -> None:
        """A held-out evaluation: Avg@k, Pass@k, cost and the per-role invalid-output rates (`role/R/...`);
        `prompts`: its per-prompt outcomes (eval_prompts.jsonl)."""
        append_jsonl(self.out / EVAL_PROMPTS, prompts)
        append_jsonl(self.out / EVAL, row)
        self.all_invalid.check(row, "held-out evaluation")
        self.trackers.log(tracked_metrics(row, "eval"), int(row["step"]))

    def close(self) -> None:
        """The run is done: the trackers that keep files get `srpo-dsl plot`'s PNGs (OUT/plots), then end."""
        if self.trackers.keep_files and self.plots is not None:
            try:
                plots = self.plots(self.out)
            except (RunError, OSError, ValueError) as exc:
                warn(f"the plots for the trackers were not drawn: {problem_of(exc)}")
            else:
                self.trackers.log_files(plots, self.out)
        self.trackers.finish()

    def fail(self) -> None:
        """The run stopped on an error (its files are kept): the trackers' runs end as failed."""
        self.trackers.finish(failed=True)

    def discard(self) -> None:
        """Remove what this log wrote (a fresh run that failed before its first checkpoint), and the
        output folder too when nothing else is in it; the trackers' runs end as failed."""
        self.trackers.finish(failed=True)
        for name in (METRICS, EVAL, EVAL_PROMPTS, CONFIG, TRACES, GRAPH, MERMAID, IDS):
            (self.out / name).unlink(missing_ok=True)
        shutil.rmtree(self.out / TENSORBOARD, ignore_errors=True)
        if not any(self.out.iterdir()):
            self.out.rmdir()


def truncate_jsonl(path: Path, last_step: int) -> None:
    """Keep the rows up to `last_step` (a resumed run rewrites what came after its checkpoint)."""
    if path.exists():
        rows = [row for row in read_jsonl(path) if as_float(row["step"]) <= last_step]
        write_lines_atomic(path, [json.dumps(row) + "\n" for row in rows])
