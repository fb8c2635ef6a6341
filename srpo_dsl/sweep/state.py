"""A sweep's folder: its plan and the state of every run (DIR/sweep.json), and where each run lives.

DIR/sweep.json                 the cells, seeds, evaluation and baseline; per run its status,
                               exit code, error line, wall time and attempts (rewritten atomically)
DIR/cells/CELL/seed-S/         an ordinary `train` run folder
DIR/logs/CELL/seed-S.log       what that run printed
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from srpo_dsl.io import write_json
from srpo_dsl.runfolder import METRICS, read_config, read_jsonl
from srpo_dsl.sweep.experiment import Cell, Experiment, ExperimentError

STATE = "sweep.json"
FORMAT = "srpo-sweep/1"
STATUSES = ("pending", "running", "done", "failed")


@dataclass
class RunState:
    status: str = "pending"
    exit_code: int | None = None
    error: str | None = None
    wall_s: float = 0.0  # summed over attempts
    attempts: int = 0


class CellPlan(TypedDict):
    """One cell of sweep.json's plan."""

    name: str
    workflow: str
    overrides: dict[str, object]
    model: NotRequired[str]  # `sweep --model`'s: every policy's model


class SweepPlan(TypedDict):
    """sweep.json's plan: the experiment as it was run (`plan_of`)."""

    experiment: str
    seeds: list[int]
    baseline: str | None
    evaluation: dict[str, int]
    datasets: list[str]
    cells: list[CellPlan]


@dataclass
class SweepState:
    """The plan (as JSON) and each run's state, keyed `CELL/seed-S`."""

    plan: SweepPlan
    runs: dict[str, RunState] = field(default_factory=dict)

    def save(self, folder: Path) -> None:
        write_json(
            folder / STATE,
            {"format": FORMAT, **self.plan, "runs": {k: asdict(v) for k, v in self.runs.items()}},
        )

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.runs.values()) for s in STATUSES}


def run_key(cell: str, seed: int) -> str:
    return f"{cell}/seed-{seed}"


def run_dir(folder: Path, cell: str, seed: int) -> Path:
    return folder / "cells" / cell / f"seed-{seed}"


def log_path(folder: Path, cell: str, seed: int) -> Path:
    return folder / "logs" / cell / f"seed-{seed}.log"


def plan_of(exp: Experiment) -> SweepPlan:
    return {
        "experiment": str(exp.path),
        "seeds": exp.seeds,
        "baseline": exp.baseline,
        "evaluation": exp.evaluation,
        "datasets": [str(p) for p in exp.datasets],
        "cells": [cell_plan(c) for c in exp.cells],
    }


def cell_plan(cell: Cell) -> CellPlan:
    plan: CellPlan = {"name": cell.name, "workflow": str(cell.workflow), "overrides": cell.overrides}
    if cell.model is not None:
        plan["model"] = cell.model
    return plan


def read_sweep_state(folder: Path) -> SweepState:
    """The state of the sweep in `folder`; ValueError (one line) when there is none."""
    path = folder / STATE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{folder}: no sweep here (no {STATE})") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a sweep state ({exc})") from None
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a sweep state (format {data.get('format')!r}, expected {FORMAT})")
    runs = {k: RunState(**v) for k, v in data.pop("runs").items()}
    data.pop("format")
    return SweepState(cast("SweepPlan", data), runs)  # the plan as `save` wrote it (its format checked)


def open_state(folder: Path, exp: Experiment) -> SweepState:
    """The state to run `exp` in `folder`: new, or the earlier one when its cells kept their settings."""
    plan = plan_of(exp)
    state = read_sweep_state(folder) if (folder / STATE).is_file() else SweepState(plan)
    before = {c["name"]: c for c in state.plan["cells"]}
    changed = [c["name"] for c in plan["cells"] if c["name"] in before and before[c["name"]] != c]
    if (
        changed
        or state.plan["evaluation"] != plan["evaluation"]
        or state.plan["datasets"] != plan["datasets"]
    ):
        what = f"cell `{changed[0]}`" if changed else "the evaluation"
        raise ExperimentError(
            [f"{folder} holds a sweep in which {what} had other settings: choose another --out"]
        )
    kept = [c for c in state.plan["cells"] if c["name"] not in {p["name"] for p in plan["cells"]}]
    state.plan = plan | {"cells": plan["cells"] + kept}
    for cell in exp.cells:
        for seed in exp.seeds:
            state.runs.setdefault(run_key(cell.name, seed), RunState())
    return state


def finished(folder: Path) -> bool:
    """A run folder that reached its last step: its final checkpoint and metrics row are on disk."""
    try:
        options = (read_config(folder) or {})["options"]
        if not isinstance(options, dict):
            return False
        steps = options["steps"]
        rows = read_jsonl(folder / METRICS)
    except (OSError, ValueError, KeyError):
        return False
    return (
        bool(rows) and rows[-1].get("step") == steps and (folder / "checkpoints" / f"step-{steps}").is_dir()
    )
