"""How each cell trained (the figures the SRPO paper reads): per step, from the runs' metrics.jsonl.

    return            the mean episode return of the step's rollouts
    grad_norm         the gradient norm before clipping
    grad_norm_cv      its coefficient of variation over the last WINDOW steps (std / mean): how
                      steady the updates are; a spike in the norm is a spike here
    response_length   generated tokens per model call
    mean_set_size     members per event (mean K)
    clip/EVENT_TYPE   the share of the event type's events (or, token-level objectives, tokens)
                      whose ratio the clip bound

`dynamics.png` plots each series per cell (mean over seeds); results.md's table gives each run's
means over its steps (return: its last WINDOW steps), then mean ± std over the seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from srpo_dsl.runfolder import METRICS, number_or_nan, read_jsonl, whole_column
from srpo_dsl.sweep.state import SweepState, run_dir
from srpo_dsl.sweep.stats import Spread, spread

SERIES = ("return", "grad_norm", "grad_norm_cv", "response_length", "mean_set_size")
WINDOW = 10  # steps: the CV's window, and the end of the run whose return is reported
CLIP = "clip/"
EVENT_CLIP = ("event/", "/clip_fraction")  # metrics.jsonl's key of an event type's clip fraction


@dataclass(frozen=True)
class RunDynamics:
    seed: int
    steps: list[int]
    series: dict[str, np.ndarray]  # SERIES and clip/EVENT_TYPE, one value per step (NaN: not recorded)


def rolling_cv(values: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """std / mean (population std) over the last `window` values at each step (fewer at the start)."""
    out = np.full(values.shape, math.nan)
    for i in range(len(values)):
        part = values[max(0, i - window + 1) : i + 1]
        mean = part.mean()
        out[i] = part.std() / mean if mean > 0 else math.nan
    return out


def read_run_dynamics(folder: Path, seed: int) -> RunDynamics:
    rows = read_jsonl(folder / METRICS)
    head, tail = EVENT_CLIP
    keys = {k for r in rows for k in r if k.startswith(head) and k.endswith(tail)}
    types = sorted(k[len(head) : -len(tail)] for k in keys)
    recorded = [name for name in SERIES if name != "grad_norm_cv"]
    series = {name: np.array([number_or_nan(r.get(name)) for r in rows]) for name in recorded}
    series["grad_norm_cv"] = rolling_cv(series["grad_norm"])
    for t in types:
        series[CLIP + t] = np.array([number_or_nan(r.get(head + t + tail)) for r in rows])
    return RunDynamics(seed, whole_column(rows, "step", folder / METRICS), series)


def collect_dynamics(folder: Path, state: SweepState) -> dict[str, list[RunDynamics]]:
    """Each planned cell's finished runs' dynamics (a cell with none: an empty list)."""
    out: dict[str, list[RunDynamics]] = {c["name"]: [] for c in state.plan["cells"]}
    for key, run in state.runs.items():
        name, _, seed = key.rpartition("/seed-")
        if run.status == "done" and name in out:
            out[name].append(read_run_dynamics(run_dir(folder, name, int(seed)), int(seed)))
    return {name: sorted(runs, key=lambda r: r.seed) for name, runs in out.items()}


def finite_mean(values: np.ndarray) -> float:
    """The mean of the finite values (NaN: a step that did not record it); NaN when there are none."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


def run_summary(run: RunDynamics) -> dict[str, float]:
    """The run's mean of each series over its steps; `return` over its last WINDOW steps; the CV over all."""
    out = {name: finite_mean(v) for name, v in run.series.items()}
    out["return"] = finite_mean(run.series["return"][-WINDOW:])
    norms = run.series["grad_norm"][np.isfinite(run.series["grad_norm"])]
    out["grad_norm_cv"] = float(norms.std() / norms.mean()) if norms.size and norms.mean() > 0 else math.nan
    return out


def cell_summary(runs: list[RunDynamics]) -> dict[str, Spread]:
    """Mean ± sample std over the seeds of each run summary (the keys every run has)."""
    summaries = [run_summary(r) for r in runs]
    keys = [k for k in summaries[0] if all(k in s for s in summaries)] if summaries else []
    return {k: spread([s[k] for s in summaries]) for k in keys}


def mean_series(runs: list[RunDynamics], name: str) -> tuple[list[int], np.ndarray]:
    """The steps every run recorded, and the mean over runs of `name` there."""
    steps = sorted(set.intersection(*(set(r.steps) for r in runs)))
    values = np.array([[dict(zip(r.steps, r.series[name]))[s] for s in steps] for r in runs])
    return steps, values.mean(axis=0)
