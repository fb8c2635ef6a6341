"""A training run's folder, read: `Run` (metrics, held-out curve, checkpoints, training dynamics),
the event traces a run or a results folder holds, and a checkpoint exported as Hugging Face models.

The names of a run's files and panels, and their readers, come from `srpo_dsl.runfolder`, their one
source; every failure to read is one `InputError` or `UsageError` line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from srpo_dsl.arguments import checked
from srpo_dsl.errors import InputError, UsageError
from srpo_dsl.jsonvalue import JsonObject, JsonValue
from srpo_dsl.outputs import check_out, staged_output
from srpo_dsl.rl.loop.plots import SMOOTHING, write_plots
from srpo_dsl.runfolder import (
    METRICS,
    PANELS,
    PLOTS,
    ROLE_PANELS,
    TRACES,
    Dynamics,
    EvalCurve,
    RoleSeries,
    RunError,
    checkpoint_folders,
    read_curve,
    read_dynamics,
    read_jsonl,
)
from srpo_dsl.runtime.episode import BranchMark, Member
from srpo_dsl.runtime.traces import TraceEpisode, TraceError, TraceEvent, read_traces

__all__ = [
    "PANELS",
    "PLOTS",
    "ROLE_PANELS",
    "SMOOTHING",
    "BranchMark",
    "Dynamics",
    "EvalCurve",
    "Exported",
    "Member",
    "RoleSeries",
    "Run",
    "TraceEpisode",
    "TraceEvent",
    "export_checkpoint",
    "load_traces",
    "write_plots",
]

T = TypeVar("T")


def read_run_file(reader: Callable[[], T]) -> T:
    """`reader()`, a run file that cannot be read as one `InputError` line."""
    try:
        return reader()
    except RunError as exc:
        raise InputError(str(exc)) from None


@dataclass(frozen=True)
class Run:
    """A training run's folder: `history` holds the steps this call trained; `metrics` every step's
    row of metrics.jsonl, `curve` the held-out Avg@k / Pass@k, `checkpoints` the step-N folders."""

    path: Path
    history: Sequence[Mapping[str, JsonValue]]  # metrics.jsonl rows

    @classmethod
    @checked
    def open(cls, path: str | Path) -> Run:
        """A run folder written before (by `train` or `srpo-dsl train`)."""
        path = Path(path)
        if not (path / METRICS).is_file():
            raise UsageError(f"cannot read {path / METRICS}: no such file (is {path} a training run?)")
        return cls(path, [])

    @property
    def metrics(self) -> list[JsonObject]:
        return read_run_file(lambda: read_jsonl(self.path / METRICS))

    @property
    def curve(self) -> EvalCurve | None:
        """Held-out Avg@k and Pass@k (percent) at each evaluated step; None before the first evaluation."""
        return read_run_file(lambda: read_curve(self.path))

    @property
    def checkpoints(self) -> list[Path]:
        """The complete `checkpoints/step-N` folders, by step."""
        return checkpoint_folders(self.path)

    @property
    def dynamics(self) -> Dynamics:
        """Every panel's series over the steps, the per-role series and the held-out curve (`plot`)."""
        return read_run_file(lambda: read_dynamics(self.path))


@checked
def load_traces(path: Path) -> list[TraceEpisode]:
    """The episodes of a traces file, or of the one a run or results folder holds."""
    if path.is_dir():
        if not (path / TRACES).is_file():
            raise UsageError(f"{path}: no {TRACES} in it (is it a run folder?)")
        path = path / TRACES
    try:
        return read_traces(path)
    except TraceError as exc:
        raise UsageError(str(exc)) from None


@dataclass(frozen=True)
class Exported:
    """What `export_checkpoint` wrote: the step, and each policy with what its folder holds."""

    step: int
    written: list[str]  # `POLICY (adapter, merged)` or `POLICY (merged)`


@checked
def export_checkpoint(run: Path, step: int | None, target: Path, overwrite: bool) -> Exported:
    """Export checkpoint `step` of `run` (None: the latest) into `target`, one folder per policy, all or
    none (docs/cli.md, `export`). Call it with the libraries quiet: it imports transformers."""
    check_out(target, overwrite, [run])  # before torch and DeepSpeed load: a taken --out is said at once
    from srpo_dsl.rl.loop.export import ExportError, export_engine, plan_export

    created = not target.exists()
    try:
        with ExitStack() as stack:  # every policy folder is renamed into place at the end, or none
            plan = plan_export(run, step)
            folders = {p: stack.enter_context(staged_output(target / p)) for p in plan.policies}
            for engine in plan.engines:
                export_engine(engine, plan.zero, folders)
    except (ExportError, OSError) as exc:
        if created and target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        raise UsageError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    kinds = {e.owner: "adapter, merged" if e.adapters is not None else "merged" for e in plan.engines}
    return Exported(plan.step, [f"{p} ({kinds[e.owner]})" for e in plan.engines for p in e.policies])
