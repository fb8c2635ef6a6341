"""A training run's outputs, written by rank 0: metrics.jsonl, eval.jsonl, TensorBoard, traces, config,
the event graph."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from srpo_dsl.io import append_jsonl, truncate_jsonl, write_atomic, write_json
from srpo_dsl.lang.export import to_json
from srpo_dsl.lang.graph import EventGraph
from srpo_dsl.runtime.episode import Episode
from srpo_dsl.runtime.traces import EventUpdate, to_trace, write_traces

METRICS, EVAL, CONFIG, TRACES, GRAPH = (
    "metrics.jsonl",
    "eval.jsonl",
    "config.json",
    "traces.jsonl",
    "graph.json",
)
EVAL_PROMPTS = "eval_prompts.jsonl"  # per evaluation: each held-out prompt's correct samples out of k
RENAMED = {"score": "return", "accuracy": "task_score"}  # metrics.jsonl: an older run's key -> its name now


def current_keys(row: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics.jsonl row with the keys an older run wrote (`RENAMED`) under their names now."""
    return {RENAMED.get(key, key): value for key, value in row.items()}


def write_graph(out: Path, graph: EventGraph) -> None:
    """OUT/graph.json: the workflow's event graph (node-link JSON), so the run is viewable without it."""
    write_atomic(out / GRAPH, to_json(graph.to_networkx()) + "\n")


class RunLog:
    """Appends one row per step (and per evaluation); a resumed run first drops rows after its checkpoint."""

    def __init__(self, out: Path, config: Mapping[str, Any], start: int, graph: EventGraph):
        from torch.utils.tensorboard import SummaryWriter

        out.mkdir(parents=True, exist_ok=True)
        write_json(out / CONFIG, config)
        write_graph(out, graph)
        for name in (METRICS, EVAL, EVAL_PROMPTS):
            truncate_jsonl(out / name, start if start else -1)
        self.out = out
        self.graph_hash = graph.hash
        self.writer = SummaryWriter(
            str(out / "tb"), purge_step=start + 1 if start else 0
        )  # drop a killed tail

    def step(
        self,
        row: Mapping[str, float],
        episodes: Sequence[Episode],
        updates: Mapping[str, EventUpdate] | None = None,
    ) -> None:
        """A training step's metrics; its rollouts, when given, replace OUT/traces.jsonl (with `updates`:
        event id -> what the update did with it)."""
        append_jsonl(self.out / METRICS, row)
        for key, value in row.items():
            if key != "step":
                self.writer.add_scalar(f"train/{key}", value, row["step"])
        if episodes:
            write_traces(self.out / TRACES, [to_trace(ep, self.graph_hash, updates) for ep in episodes])
        self.writer.flush()

    def evaluation(self, row: Mapping[str, Any], prompts: Mapping[str, Any]) -> None:
        """A held-out evaluation: Avg@k, Pass@k, cost and the per-role invalid-output rates (`role/R/...`);
        `prompts`: its per-prompt outcomes (eval_prompts.jsonl)."""
        append_jsonl(self.out / EVAL_PROMPTS, prompts)
        append_jsonl(self.out / EVAL, row)
        self.writer.add_scalar(f"eval/avg_at_{row['k']}", row["avg_at_k"], row["step"])
        self.writer.add_scalar(f"eval/pass_at_{row['k']}", row["pass_at_k"], row["step"])
        for key, value in row.items():
            if key.startswith("role/"):
                self.writer.add_scalar(f"eval/{key}", value, row["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    def discard(self) -> None:
        """Remove what this log wrote (a fresh run that failed before its first checkpoint), and the
        output folder too when nothing else is in it."""
        self.writer.close()
        for name in (METRICS, EVAL, EVAL_PROMPTS, CONFIG, TRACES, GRAPH):
            (self.out / name).unlink(missing_ok=True)
        shutil.rmtree(self.out / "tb", ignore_errors=True)
        if not any(self.out.iterdir()):
            self.out.rmdir()
