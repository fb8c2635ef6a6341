"""An experiment file (TOML): workflows, cells of training overrides, seeds, held-out evaluation, baseline.

    seeds = [1, 2, 3]
    baseline = "sqrt"                  # a cell's name: every other cell is compared with it
    [eval]                             # the same held-out evaluation for every cell
    k = 4                              # eval_k; also size (eval_size), every (eval_every),
    datasets = ["../data/math_sample.jsonl"]  # and data files in place of each task's eval split
    [train]                            # overrides of every cell (`train with (...)` names)
    steps = 100
    [[cell]]                           # one cell, named
    name = "sqrt"
    workflow = "../workflows/toy_k4.srpo"
    set_norm = "sqrt"
    [[grid]]                           # a product: one cell per combination of the lists
    workflow = "../workflows/toy_k4.srpo"
    name = "k4"                        # cells k4-objective=grpo-lr=0.001, ...
    objective = ["grpo", "drmas"]
    lr = [1e-3, 1e-4]

Paths are relative to the experiment file. Every error is one line `FILE:LINE:COL: error: ...`;
the workflows are checked (`srpo-dsl validate`) before any cell runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from srpo_dsl.io import not_utf8
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.syntax.messages import did_you_mean
from srpo_dsl.sweep.positions import locate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SWEEP_OWNED = {
    "seed": "seeds",
    "eval_k": "[eval] k",
    "eval_size": "[eval] size",
    "eval_every": "[eval] every",
}
OVERRIDES = tuple(name for name in TrainOptions.model_fields if name not in SWEEP_OWNED)
EVAL_OPTIONS = {"k": "eval_k", "size": "eval_size", "every": "eval_every"}  # [eval] key -> train option
CELL_NAME = r"^[A-Za-z0-9_.=+\-]+$"
Loc = tuple[str | int, ...]  # a place in the experiment file: keys and list indexes (as pydantic's `loc`)
Scalar = bool | int | float | str


class ExperimentError(Exception):
    """Problems of an experiment file or its workflows: one positioned line (or diagnostic) each."""

    def __init__(self, lines: list[str], positioned: bool = False):
        super().__init__(lines[0] if lines else "invalid experiment")
        self.lines = lines
        self.positioned = positioned  # lines start with FILE:LINE:COL: error:


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EvalSpec(_Spec):
    k: int | None = Field(default=None, ge=1)
    size: int | None = Field(default=None, ge=1)
    every: int | None = Field(default=None, ge=1)
    datasets: list[str] = []


class CellSpec(_Spec):
    """`[[cell]]`: a name, a workflow, and overrides as further keys."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(pattern=CELL_NAME)
    workflow: str


class GridSpec(_Spec):
    """`[[grid]]`: a workflow, an optional name prefix, overrides (a list varies, a scalar is fixed)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str | None = Field(default=None, pattern=CELL_NAME)
    workflow: str


class ExperimentSpec(_Spec):
    seeds: list[int] = Field(min_length=1)
    baseline: str | None = None
    eval: EvalSpec = EvalSpec()
    train: dict[str, Scalar] = {}
    cell: list[CellSpec] = []
    grid: list[GridSpec] = []


@dataclass(frozen=True)
class Cell:
    """One configuration; it runs once per seed. `overrides` are `train` option names -> values."""

    name: str
    workflow: Path
    overrides: dict[str, object]  # a `train` option -> its value (TOML's), as TrainOptions checked it
    model: str | None = None  # every policy's model (`sweep --model`); None: the workflow's


@dataclass(frozen=True)
class Experiment:
    path: Path
    cells: list[Cell]
    seeds: list[int]
    baseline: str | None
    evaluation: dict[str, int]  # train option -> value (eval_k, eval_size, eval_every), as given
    datasets: list[Path]

    def cell(self, name: str) -> Cell:
        return next(c for c in self.cells if c.name == name)


def overridden(
    exp: Experiment,
    options: dict[str, str],
    model: str | None = None,
    seeds: list[int] | None = None,
    datasets: list[Path] | None = None,
) -> Experiment:
    """The experiment as the command line changes it (`sweep --option/--model/--seeds/--eval-data`):
    `options`, `train` options of every cell that win over the cell's own (`eval_k`, `eval_size`,
    `eval_every`: the one evaluation's, still the same for every cell); every policy's `model`; the
    `seeds`; the evaluation's `datasets` in place of `[eval] datasets`. `ExperimentError` (one line) for
    `seed` (`--seeds`), no option of that name, or a data file that is not there."""
    evaluation = {k: v for k, v in options.items() if k in EVAL_OPTIONS.values()}
    train: dict[str, object] = {k: v for k, v in options.items() if k not in evaluation}
    for key, value in evaluation.items():
        if not value.isdigit() or int(value) < 1:
            raise ExperimentError([f"--option {key}={value}: expected a whole number >= 1"])
    for key in train:
        if key not in OVERRIDES:
            hint = "use --seeds" if key == "seed" else did_you_mean(key, OVERRIDES) or "see `train with`"
            raise ExperimentError([f"--option {key}: not an option a sweep may set ({hint})"])
    for path in datasets or ():
        if not path.is_file():
            raise ExperimentError([f"--eval-data {path}: no such file"])
    cells = [dataclasses.replace(c, overrides=c.overrides | train, model=model or c.model) for c in exp.cells]
    return dataclasses.replace(
        exp,
        cells=cells,
        seeds=seeds or exp.seeds,
        evaluation=exp.evaluation | {k: int(v) for k, v in evaluation.items()},
        datasets=datasets or exp.datasets,
    )


def load_experiment(path: Path) -> Experiment:
    """Read, validate and expand an experiment file; `ExperimentError` with positioned lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ExperimentError([f"cannot read {path}: {not_utf8(exc)}"]) from None
    except OSError as exc:
        raise ExperimentError([f"cannot read {path}: {exc.strerror or exc}"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))  # tomllib's own position
        lines = text.splitlines() or [""]
        line, col = (at.group(1), at.group(2)) if at else (len(lines), len(lines[-1]) + 1)  # end of document
        raise ExperimentError([f"{path}:{line}:{col}: error: {str(exc).split(' (at')[0]}"], True) from None
    where = ExperimentPositions(path, text)
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise where.error(err["loc"], f"`{'.'.join(map(str, err['loc']))}`: {err['msg']}") from None
    base = overrides_of(spec.train, ("train",), where, lists=False)
    return checked(spec, [*named_cells(spec, base, where), *grid_cells(spec, base, where)], where)


@dataclass(frozen=True)
class ExperimentPositions:
    """Positions in the experiment file, for its errors."""

    path: Path
    text: str

    def error(self, loc: Loc, message: str) -> ExperimentError:
        line, col = locate(self.text, loc)
        return ExperimentError([f"{self.path}:{line}:{col}: error: {message}"], True)

    def existing(self, relative: str, loc: Loc) -> Path:
        """A file named in the experiment (relative to its folder); an error at `loc` if it is missing."""
        p = Path(relative) if Path(relative).is_absolute() else self.path.parent / relative
        if not p.is_file():
            raise self.error(loc, f"cannot read {p}: no such file")
        return p


def overrides_of(
    extra: Mapping[str, object], loc: Loc, where: ExperimentPositions, lists: bool
) -> dict[str, object]:
    """A table's override keys, checked: known `train` options, values of the right type."""
    for key, value in extra.items():
        if key in SWEEP_OWNED:
            raise where.error((*loc, key), f"`{key}` is set by the experiment's {SWEEP_OWNED[key]}")
        if key not in OVERRIDES:
            hint = did_you_mean(key, OVERRIDES)
            raise where.error(
                (*loc, key),
                f"unknown override `{key}`" + (f" ({hint})" if hint else "") + "; see TrainOptions",
            )
        for v in value if lists and isinstance(value, list) else [value]:
            check_value(key, v, (*loc, key), where)
    return dict(extra)


def check_value(key: str, value: object, loc: Loc, where: ExperimentPositions) -> None:
    try:
        TrainOptions.model_validate({key: value})
    except ValidationError as exc:
        raise where.error(loc, f"override `{key}` = {value!r}: {exc.errors()[0]['msg']}") from None


Located = tuple[Cell, Loc]  # a cell and where the file defines it


def named_cells(spec: ExperimentSpec, base: dict[str, object], where: ExperimentPositions) -> list[Located]:
    out: list[Located] = []
    for i, c in enumerate(spec.cell):
        extra = overrides_of(c.model_extra or {}, ("cell", i), where, lists=False)
        workflow = where.existing(c.workflow, ("cell", i, "workflow"))
        out.append((Cell(c.name, workflow, base | extra), ("cell", i, "name")))
    return out


def grid_cells(spec: ExperimentSpec, base: dict[str, object], where: ExperimentPositions) -> list[Located]:
    """Each grid's product of its list-valued overrides, named PREFIX-key=value-...; scalars fixed."""
    out: list[Located] = []
    for i, g in enumerate(spec.grid):
        extra = overrides_of(g.model_extra or {}, ("grid", i), where, lists=True)
        workflow = where.existing(g.workflow, ("grid", i, "workflow"))
        varied = {k: v for k, v in extra.items() if isinstance(v, list)}
        fixed = {k: v for k, v in extra.items() if not isinstance(v, list)}
        for key, values in varied.items():
            if not values:
                raise where.error(("grid", i, key), f"`{key}`: an empty list makes no cells")
        prefix = g.name or workflow.stem
        for combo in itertools.product(*varied.values()):
            chosen = dict(zip(varied, combo))
            name = "-".join([prefix, *(f"{k}={v}" for k, v in chosen.items())])
            out.append(
                (Cell(name, workflow, base | fixed | chosen), ("grid", i, "name" if g.name else "workflow"))
            )
    return out


def checked(spec: ExperimentSpec, cells: list[Located], where: ExperimentPositions) -> Experiment:
    """Distinct, well-formed cell names, a baseline that names a cell, distinct seeds, datasets that exist."""
    if not cells:
        raise where.error((), "no cells: add a [[cell]] or a [[grid]] table")
    names: list[str] = []
    for cell, loc in cells:
        if cell.name in names:
            raise where.error(loc, f"two cells are named `{cell.name}`")
        if not re.match(CELL_NAME, cell.name):
            raise where.error(loc, f"cell name `{cell.name}`: use only letters, digits and _.=+-")
        names.append(cell.name)
    if spec.baseline is not None and spec.baseline not in names:
        hint = did_you_mean(spec.baseline, names)
        raise where.error(
            ("baseline",), f"baseline `{spec.baseline}` is no cell" + (f" ({hint})" if hint else "")
        )
    if len(set(spec.seeds)) < len(spec.seeds):
        raise where.error(("seeds",), "the seeds repeat")
    datasets = [where.existing(d, ("eval", "datasets")) for d in spec.eval.datasets]
    evaluation = {EVAL_OPTIONS[k]: v for k, v in spec.eval.model_dump().items() if k in EVAL_OPTIONS and v}
    return Experiment(
        where.path, [c for c, _ in cells], list(spec.seeds), spec.baseline, evaluation, datasets
    )


def workflow_errors(exp: Experiment) -> list[str]:
    """Each workflow's errors as `srpo-dsl validate` prints them (position, source line, hint)."""
    from srpo_dsl.lang import analyze
    from srpo_dsl.lang.syntax.messages import render_all

    out: list[str] = []
    for path in dict.fromkeys(c.workflow for c in exp.cells):
        text = path.read_text(encoding="utf-8")
        result = analyze(text, str(path))
        out += render_all([d for d in result.diagnostics if d.severity == "error"], text)
    return out
