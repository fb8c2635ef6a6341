"""A sweep's results from what is on disk: per cell mean ± std over seeds, paired differences, files.

Every figure is read from the runs' folders (eval.jsonl, eval_prompts.jsonl) and the sweep's
state (wall time), so `srpo-dsl sweep --report DIR` rebuilds the same files at any time.
Metrics are held-out, in percent: Avg@k and Pass@k macro-averaged over the evaluation's
datasets, at the run's last evaluation (final) and at its best evaluation (best, each metric
on its own).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypedDict, cast

import numpy as np

from srpo_dsl.rl.loop.ranges import difference_range, range_of
from srpo_dsl.runfolder import (
    EVAL,
    EVAL_PROMPTS,
    PERCENT,
    RunError,
    column,
    number_or_nan,
    read_jsonl,
    whole_column,
)
from srpo_dsl.runtime.metrics import prompt_at_k
from srpo_dsl.sweep.state import SweepState, run_dir
from srpo_dsl.sweep.stats import (
    BOOTSTRAP_SEED,
    LEVEL,
    REPLICATES,
    Difference,
    Spread,
    paired_bootstrap,
    spread,
)

METRICS = (
    "final_avg",
    "final_pass",
    "best_avg",
    "best_pass",
    "tokens_per_episode",
    "calls_per_episode",
    "wall_s",
)
PAIRED = {"final_avg": "avg_at_k", "final_pass": "pass_at_k"}  # metric -> per-prompt outcome compared
SCHEME = "two-stage: seeds with replacement, then each dataset's prompts with replacement within each seed"


class PromptOutcomes(TypedDict):
    """One dataset of an evaluation (eval_prompts.jsonl): each held-out prompt's id and correct samples."""

    ids: list[str]
    correct: list[int]  # of k


@dataclass(frozen=True)
class RunResult:
    """One finished run: its held-out curve (percent) and its last evaluation's per-prompt outcomes."""

    seed: int
    k: int
    steps: list[int]
    avg: list[float]
    passed: list[float]
    values: dict[str, float]  # METRICS
    prompts: dict[str, PromptOutcomes]  # by dataset


def read_run(folder: Path, seed: int, wall_s: float) -> RunResult:
    """ValueError (one line) when the run has no evaluation."""
    rows = read_jsonl(folder / EVAL)
    prompts = read_jsonl(folder / EVAL_PROMPTS)
    if not rows or not prompts:
        raise ValueError(f"{folder}: no held-out evaluation recorded (eval.jsonl, eval_prompts.jsonl)")
    avg = [PERCENT * v for v in column(rows, "avg_at_k", folder / EVAL)]
    passed = [PERCENT * v for v in column(rows, "pass_at_k", folder / EVAL)]
    last = rows[-1]
    datasets = prompts[-1].get("datasets")
    if not isinstance(datasets, dict):
        raise RunError(f"{folder / EVAL_PROMPTS}: row {len(prompts)}: `datasets` is not an object")
    values = {
        "final_avg": avg[-1],
        "final_pass": passed[-1],
        "best_avg": max(avg),
        "best_pass": max(passed),
        "tokens_per_episode": number_or_nan(last.get("tokens_per_episode")),
        "calls_per_episode": number_or_nan(last.get("calls_per_episode")),
        "wall_s": wall_s,
    }
    k = whole_column([last], "k", folder / EVAL)[0]
    steps = whole_column(rows, "step", folder / EVAL)
    outcomes = cast("dict[str, PromptOutcomes]", datasets)  # each dataset's row, as `rl.loop` writes it
    return RunResult(seed, k, steps, avg, passed, values, outcomes)


@dataclass(frozen=True)
class CellResult:
    name: str
    workflow: str
    overrides: dict[str, object]
    runs: list[RunResult]
    failed: dict[int, str]  # seed -> error line
    spreads: dict[str, Spread]  # METRICS
    versus: dict[str, Difference | str]  # PAIRED metric -> difference to the baseline, or why there is none


def outcome(correct: list[int], k: int, which: str) -> np.ndarray:
    """Per prompt its `which` of `AtK` from c of k samples correct: Avg@k c / k, or Pass@k (with n = k,
    whether any sample is correct)."""
    return np.array([getattr(prompt_at_k(k, c, k), which) for c in correct], dtype=float)


def compare(cell: list[RunResult], base: list[RunResult], which: str) -> Difference | str:
    """Paired over the seeds both cells finished and the prompts of each dataset (same ids required)."""
    by_seed = {r.seed: r for r in base}
    pairs = [(r, by_seed[r.seed]) for r in cell if r.seed in by_seed]
    if not pairs:
        return "no seed finished in both cells"
    first, first_base = pairs[0]
    if set(first.prompts) != set(first_base.prompts) or first.k != first_base.k:
        return "other datasets or k than the baseline"
    arrays = []
    for name in first.prompts:
        if any(a.prompts[name]["ids"] != b.prompts[name]["ids"] for a, b in pairs):
            return f"dataset {name}: other prompts than the baseline"
        arrays.append(
            np.stack(
                [
                    outcome(a.prompts[name]["correct"], a.k, which)
                    - outcome(b.prompts[name]["correct"], b.k, which)
                    for a, b in pairs
                ]
            )
            * PERCENT
        )
    return paired_bootstrap(arrays, bounds=difference_range(range_of(which, PERCENT)))


def collect(folder: Path, state: SweepState) -> list[CellResult]:
    """Every planned cell's finished runs and failures, its spreads, and its comparison with the baseline."""
    raw = []
    for cell in state.plan["cells"]:
        runs, failed = [], {}
        for key, run in state.runs.items():
            name, _, seed = key.rpartition("/seed-")
            if name != cell["name"]:
                continue
            if run.status == "done":
                runs.append(read_run(run_dir(folder, name, int(seed)), int(seed), run.wall_s))
            elif run.status == "failed":
                failed[int(seed)] = f"exit {run.exit_code}: {run.error}"
        raw.append((cell, sorted(runs, key=lambda r: r.seed), failed))
    base = next((runs for cell, runs, _ in raw if cell["name"] == state.plan.get("baseline")), None)
    out = []
    for cell, runs, failed in raw:
        spreads = {m: spread([r.values[m] for r in runs]) for m in METRICS}
        versus: dict[str, Difference | str] = {}
        if base is not None and cell["name"] != state.plan["baseline"]:
            versus = {m: compare(runs, base, which) for m, which in PAIRED.items()}
        out.append(
            CellResult(cell["name"], cell["workflow"], cell["overrides"], runs, failed, spreads, versus)
        )
    return out


def sweep_k(cells: list[CellResult]) -> int | None:
    """The k of the sweep's Avg@k and Pass@k: its first finished run's (None before one finished)."""
    return next((r.k for c in cells for r in c.runs), None)


def to_json(cells: list[CellResult], state: SweepState) -> dict[str, object]:
    def cell_json(c: CellResult) -> dict[str, object]:
        return {
            "name": c.name,
            "workflow": c.workflow,
            "overrides": c.overrides,
            "seeds": [r.seed for r in c.runs],
            "failed": {str(s): e for s, e in c.failed.items()},
            **{m: asdict(s) | {"values": [r.values[m] for r in c.runs]} for m, s in c.spreads.items()},
            "versus_baseline": {
                m: asdict(d) if isinstance(d, Difference) else d for m, d in c.versus.items()
            },
            "curves": [{"seed": r.seed, "steps": r.steps, "avg": r.avg, "pass": r.passed} for r in c.runs],
        }

    return {
        "k": sweep_k(cells),
        "baseline": state.plan.get("baseline"),
        "units": "percent (held-out, macro over datasets); cost per episode (last evaluation); wall seconds",
        "bootstrap": {"scheme": SCHEME, "replicates": REPLICATES, "seed": BOOTSTRAP_SEED, "level": LEVEL},
        "cells": [cell_json(c) for c in cells],
    }


def without_nan(data: object) -> object:
    """NaN (the sample std of one seed, a cost an older run did not record) as None: JSON's null."""
    if isinstance(data, float) and math.isnan(data):
        return None
    if isinstance(data, dict):
        return {k: without_nan(v) for k, v in data.items()}
    if isinstance(data, list):
        return [without_nan(v) for v in data]
    return data
