"""A training run's folder: its outputs, written by rank 0 (metrics.jsonl, eval.jsonl, traces, config, the
event graph; the trackers of `report_to`: TensorBoard's tb/, ...), and the readers of what `plot`, `view`,
`sweep` and the end-of-run report show from it. A file cut by a killed writer is read up to its last
complete line."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srpo_dsl.io import (
    append_jsonl,
    complete_lines,
    loads,
    write_atomic,
    write_json,
    write_lines_atomic,
    writing,
)
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.lang.compile.graph_formats import to_json, to_mermaid
from srpo_dsl.rl.loop.all_invalid import AllInvalidWarning
from srpo_dsl.rl.loop.ranges import PERCENT
from srpo_dsl.runtime.episode import Episode
from srpo_dsl.runtime.traces import EventUpdate, to_trace, write_traces
from srpo_dsl.trackers.base import TrackedRun, run_identity, tracked_metrics
from srpo_dsl.trackers.fanout import IDS, Trackers, problem_of, warn
from srpo_dsl.trackers.tensorboard import FOLDER as TENSORBOARD

METRICS, EVAL, CONFIG, TRACES, GRAPH = (
    "metrics.jsonl",
    "eval.jsonl",
    "config.json",
    "traces.jsonl",
    "graph.json",
)
MERMAID = "graph.mmd"  # the graph as Mermaid, for the trackers that keep files
PLOTS = "plots"  # `srpo-dsl plot`'s PNGs, drawn at the end of a run whose trackers keep files
EVAL_PROMPTS = "eval_prompts.jsonl"  # per evaluation: each held-out prompt's correct samples out of k
RENAMED = {"score": "return", "accuracy": "task_score"}  # metrics.jsonl: an older run's key -> its name now


def current_keys(row: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics.jsonl row with the keys an older run wrote (`RENAMED`) under their names now."""
    return {RENAMED.get(key, key): value for key, value in row.items()}


PANELS = {  # metrics.jsonl key -> panel title (the paper's training-dynamics figure)
    "return": "Return (mean; task score + invalid penalty)",
    "grad_norm": "Gradient norm",
    "response_length": "Response length (tokens)",
    "mean_set_size": "Mean active-set size",
}
ROLE_PANELS = {  # metrics.jsonl `role/ROLE/<metric>` -> panel `role_<metric>`, one line per role
    "invalid_rate": "Invalid-output rate per role",
    "response_length": "Response length per role (tokens)",
    "abs_advantage": "Mean |advantage| per role",  # what the update did per role
    "clip_fraction": "Clip fraction per role",
}


class RunError(ValueError):
    """A run file that cannot be read as what it should hold; the message is one line."""


def write_graph(out: Path, graph: EventGraph) -> None:
    """OUT/graph.json: the workflow's event graph (node-link JSON), so the run is viewable without it."""
    write_atomic(out / GRAPH, to_json(graph.to_networkx()) + "\n")


class RunLog:
    """Appends one row per step (and per evaluation), and reports each to the run's trackers (`report_to`);
    a resumed run first drops rows after its checkpoint. `plots` draws a run folder's PNGs and returns
    them (`plots.run_plots`; given by the loop, which is above this module): at the end of a run whose
    trackers keep files."""

    def __init__(
        self,
        out: Path,
        config: Mapping[str, Any],
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
        rows = [row for row in read_jsonl(path) if row["step"] <= last_step]
        write_lines_atomic(path, [json.dumps(row) + "\n" for row in rows])


# --- reading a run -------------------------------------------------------------------------


def read_jsonl(path: Path, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """A run file's rows ([] when it does not exist) up to its last complete line: an unfinished one (its
    writer was killed mid-line) is left out, and said in `notes`; RunError when it is not JSON Lines."""
    if not path.is_file():
        return []
    try:
        lines, cut = complete_lines(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"cannot read {path}: {type(exc).__name__}") from None
    rows = []
    for i, line in enumerate(lines, 1):
        try:
            row = loads(line) if line.strip() else None
        except json.JSONDecodeError as exc:
            raise RunError(f"{path}:{i}: invalid JSON: {exc.msg}") from None
        if row is not None and not isinstance(row, dict):
            raise RunError(f"{path}:{i}: a row is a JSON object, not {type(row).__name__}")
        if row is not None:
            rows.append(row)
    if cut is not None and notes is not None:
        notes.append(f"{path.name}: line {cut} is unfinished (the run was stopped mid-step); left out")
    return rows


def column(rows: list[dict[str, Any]], key: str, path: Path) -> list[float]:
    """Each row's number `key` (`read_jsonl`'s rows of `path`); RunError naming the row that has none."""
    out = []
    for i, row in enumerate(rows, 1):
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RunError(f"{path}: row {i}: `{key}` is not a number")
        out.append(value)
    return out


def whole_column(rows: list[dict[str, Any]], key: str, path: Path) -> list[int]:
    """Each row's whole number `key` (a step, a k); RunError naming a row whose value is none (1e400)."""
    values = column(rows, key, path)
    for i, value in enumerate(values, 1):
        if not math.isfinite(value) or value != int(value):
            raise RunError(f"{path}: row {i}: `{key}` is not a whole number")
    return [int(value) for value in values]


def number_or_nan(value: object) -> float:
    """A recorded metric as a float; NaN for one that is missing, not a number or beyond a float's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an integer of more than 308 digits
        return math.nan


def read_config(run: Path) -> dict[str, Any] | None:
    """RUN/config.json, the settings the run was started with (None when absent); RunError when it is not
    a JSON object."""
    path = run / CONFIG
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunError(f"{path} is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(config, dict):
        raise RunError(f"{path} is not a JSON object")
    return config


@dataclass(frozen=True)
class EvalCurve:
    """Held-out Avg@k and Pass@k (percent) at each evaluated step, from eval.jsonl."""

    k: int
    steps: list[int]
    avg: list[float]
    passed: list[float]


def eval_curve(rows: list[dict[str, Any]], path: Path) -> EvalCurve:
    """The curve of eval.jsonl's rows (read from `path`); RunError when a row lacks its fields."""
    try:
        return EvalCurve(
            int(rows[-1]["k"]),
            [int(r["step"]) for r in rows],
            [PERCENT * float(r["avg_at_k"]) for r in rows],
            [PERCENT * float(r["pass_at_k"]) for r in rows],
        )
    except (IndexError, KeyError, TypeError, ValueError, OverflowError) as exc:  # (a step of 1e400)
        raise RunError(f"{path}: not an eval file ({type(exc).__name__}: {exc})") from None


def read_curve(run: Path) -> EvalCurve | None:
    """The held-out curve of RUN/eval.jsonl (None before the first evaluation)."""
    rows = read_jsonl(run / EVAL)
    return eval_curve(rows, run / EVAL) if rows else None


@dataclass(frozen=True)
class RoleSeries:
    """One role's values of one metric at the steps that have it (a role no episode reached has none)."""

    role: str
    steps: list[int]
    values: list[float]


def role_series(rows: list[dict[str, Any]], metric: str) -> list[RoleSeries]:
    """Each role's `role/ROLE/metric` over the steps that logged it, roles in order of appearance."""
    names = [k.split("/")[1] for r in rows for k in r if k.startswith("role/") and k.endswith(f"/{metric}")]
    out = []
    for role in dict.fromkeys(names):
        key = f"role/{role}/{metric}"
        logged = [r for r in rows if key in r]
        out.append(RoleSeries(role, [int(r["step"]) for r in logged], [float(r[key]) for r in logged]))
    return out


@dataclass(frozen=True)
class Dynamics:
    """What `plot` draws: the per-step metrics, the per-role ones (when logged), the held-out curve."""

    steps: list[int]
    series: dict[str, list[float]]  # LOGGED key -> its value at each step (NaN: not logged then)
    curve: EvalCurve | None
    roles: dict[str, list[RoleSeries]]  # metric of ROLE_PANELS -> one series per role; {} for older runs


def read_dynamics(run: Path) -> Dynamics:
    """RUN/metrics.jsonl's panels (an older run's under the keys of today, `current_keys`) and
    RUN/eval.jsonl's curve; RunError when there is nothing to draw or a panel's metric is missing."""
    path = run / METRICS
    rows = [current_keys(row) for row in read_jsonl(path)]
    if not rows:
        raise RunError(f"{path}: no steps recorded yet")
    try:
        for row in rows:
            for key in PANELS:
                float(row[key])  # a number in every row, or not a run's metrics
        return dynamics_of(rows, read_curve(run))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # (OverflowError: a step of 1e400)
        raise RunError(f"{path}: not a metrics file ({type(exc).__name__}: {exc})") from None


LOGGED = (*PANELS, "task_score")  # the per-step metrics charted (the task score beside the return)


def dynamics_of(rows: list[dict[str, Any]], curve: EvalCurve | None) -> Dynamics:
    """The dynamics of metrics rows (`current_keys`'): each LOGGED metric some row has (NaN in a row
    without it), the per-role series logged. KeyError, TypeError, ValueError: rows that are not a run's."""
    steps = [int(r["step"]) for r in rows]
    series = {key: [number_or_nan(r.get(key)) for r in rows] for key in LOGGED if any(key in r for r in rows)}
    roles = {metric: role_series(rows, metric) for metric in ROLE_PANELS}
    return Dynamics(steps, series, curve, {m: s for m, s in roles.items() if s})
