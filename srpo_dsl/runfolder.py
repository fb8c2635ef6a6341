"""A run folder's format: the files a training run's folder holds, by name, and the readers of what `plot`,
`view`, `sweep`, the Python API and the end-of-run report show from them. One source for every layer: the
training loop writes these files (`rl/loop/runlog.py`, `rl/loop/checkpoint.py`, `rl/loop/plan_io.py`), the
rest read them here. A file cut by a killed writer is read up to its last complete line.

A run folder holds:
- METRICS, one row per training step; EVAL, one row per held-out evaluation (Avg@k and Pass@k as fractions,
  read in percent: PERCENT), and EVAL_PROMPTS, each evaluation's per-prompt outcomes;
- CONFIG, the settings the run was started with; GRAPH, the workflow's event graph (node-link JSON), and
  MERMAID, the same graph as Mermaid for the trackers that keep files; TRACES, the last step's rollouts;
- CHECKPOINTS, one complete `step-N` folder per checkpoint; PLOTS, `srpo-dsl plot`'s PNGs;
- while a process owns it, LOCK (`runlock`), and while a launch runs, PLAN, the plan its processes read;
  neither is a result;
- what the trackers of `report_to` write (TensorBoard's tb/, ...: `srpo_dsl.trackers`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from srpo_dsl.io import complete_lines, loads
from srpo_dsl.jsonvalue import JsonObject, JsonValue

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
CHECKPOINTS = "checkpoints"  # checkpoints/step-N: one complete checkpoint (`.step-N.tmp` while written)
LOCK = ".lock"  # the run folder's owner (`runlock`); not one of its results (`outputs.held` leaves it out)
PLAN = ".plan.json"  # the plan of the launch writing the folder (`rl.loop.plan_io`); no result either
PERCENT = 100.0  # the scale of Avg@k and Pass@k wherever they are shown (percent)
RENAMED = {"score": "return", "accuracy": "task_score"}  # metrics.jsonl: an older run's key -> its name now


def current_keys(row: Mapping[str, JsonValue]) -> JsonObject:
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


def checkpoint_folder(run: Path, step: int) -> Path:
    """RUN/checkpoints/step-N: the checkpoint of step N."""
    return run / CHECKPOINTS / f"step-{step}"


def checkpoint_folders(run: Path) -> list[Path]:
    """The complete `checkpoints/step-N` folders of RUN, by step (a `.step-N.tmp` folder is never one)."""
    found = [(int(p.name[5:]), p) for p in (run / CHECKPOINTS).glob("step-*") if p.name[5:].isdigit()]
    return [p for _, p in sorted(found)]


def read_jsonl(path: Path, notes: list[str] | None = None) -> list[JsonObject]:
    """A run file's rows ([] when it does not exist) up to its last complete line: an unfinished one (its
    writer was killed mid-line) is left out, and said in `notes`; RunError when it is not JSON Lines."""
    if not path.is_file():
        return []
    try:
        lines, cut = complete_lines(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"cannot read {path}: {type(exc).__name__}") from None
    rows: list[JsonObject] = []
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


def column(rows: list[JsonObject], key: str, path: Path) -> list[float]:
    """Each row's number `key` (`read_jsonl`'s rows of `path`); RunError naming the row that has none."""
    out = []
    for i, row in enumerate(rows, 1):
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RunError(f"{path}: row {i}: `{key}` is not a number")
        out.append(value)
    return out


def whole_column(rows: list[JsonObject], key: str, path: Path) -> list[int]:
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


def as_float(value: JsonValue) -> float:
    """`float(value)` of a value read from JSON: a number, or a string that spells one (ValueError when it
    does not); TypeError, in `float`'s own words, for null, a list or an object."""
    if isinstance(value, (bool, int, float, str)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")


def as_int(value: JsonValue) -> int:
    """`int(value)` of a value read from JSON (a float is cut to its whole part, as `int` does); TypeError,
    in `int`'s own words, for null, a list or an object."""
    if isinstance(value, (bool, int, float, str)):
        return int(value)
    raise TypeError(
        f"int() argument must be a string, a bytes-like object or a real number, not '{type(value).__name__}'"
    )


def read_config(run: Path) -> JsonObject | None:
    """RUN/config.json, the settings the run was started with (None when absent); RunError when it is not
    a JSON object."""
    path = run / CONFIG
    if not path.is_file():
        return None
    try:
        config: JsonValue = json.loads(path.read_text(encoding="utf-8"))
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


def eval_curve(rows: list[JsonObject], path: Path) -> EvalCurve:
    """The curve of eval.jsonl's rows (read from `path`); RunError when a row lacks its fields."""
    try:
        return EvalCurve(
            as_int(rows[-1]["k"]),
            [as_int(r["step"]) for r in rows],
            [PERCENT * as_float(r["avg_at_k"]) for r in rows],
            [PERCENT * as_float(r["pass_at_k"]) for r in rows],
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


def role_series(rows: list[JsonObject], metric: str) -> list[RoleSeries]:
    """Each role's `role/ROLE/metric` over the steps that logged it, roles in order of appearance."""
    names = [k.split("/")[1] for r in rows for k in r if k.startswith("role/") and k.endswith(f"/{metric}")]
    out = []
    for role in dict.fromkeys(names):
        key = f"role/{role}/{metric}"
        logged = [r for r in rows if key in r]
        out.append(RoleSeries(role, [as_int(r["step"]) for r in logged], [as_float(r[key]) for r in logged]))
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
                as_float(row[key])  # a number in every row, or not a run's metrics
        return dynamics_of(rows, read_curve(run))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # (OverflowError: a step of 1e400)
        raise RunError(f"{path}: not a metrics file ({type(exc).__name__}: {exc})") from None


LOGGED = (*PANELS, "task_score")  # the per-step metrics charted (the task score beside the return)


def dynamics_of(rows: list[JsonObject], curve: EvalCurve | None) -> Dynamics:
    """The dynamics of metrics rows (`current_keys`'): each LOGGED metric some row has (NaN in a row
    without it), the per-role series logged. KeyError, TypeError, ValueError: rows that are not a run's."""
    steps = [as_int(r["step"]) for r in rows]
    series = {key: [number_or_nan(r.get(key)) for r in rows] for key in LOGGED if any(key in r for r in rows)}
    roles = {metric: role_series(rows, metric) for metric in ROLE_PANELS}
    return Dynamics(steps, series, curve, {m: s for m, s in roles.items() if s})
