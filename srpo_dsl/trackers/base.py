"""What every tracker implements, what it is told about the run, and the keys it logs under.

A tracker is made by its registry entry's factory, `factory(run: TrackedRun) -> Tracker`, on rank 0 when
the run starts; it raises (any exception) when it cannot start, and the run goes on without it. Every
tracker logs the same keys: `train/KEY` for each key of a metrics.jsonl row, `eval/KEY` for each of an
eval.jsonl row (a nested one joined by `/`: `eval/datasets/heldout/avg_at_k`), at the row's step.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

EXPERIMENT_ENV = "SRPO_DSL_EXPERIMENT"  # the experiment a run belongs to (a sweep sets it: its name)
RUN_NAME_ENV = "SRPO_DSL_RUN_NAME"  # the run's name in its experiment (a sweep sets it: CELL/seed-S)


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker is told when the run starts."""

    out: Path  # the run folder
    name: str  # the run's name: $SRPO_DSL_RUN_NAME, else the run folder's name
    experiment: str  # runs grouped together: $SRPO_DSL_EXPERIMENT, else the workflow's name
    config: Mapping[str, object]  # OUT/config.json: the options, models, device, ...
    start: int  # the last step already done (0: a fresh run)
    resume_id: str | None  # the tracker's own run id from OUT/trackers.json, when the run is resumed


def run_identity(out: Path, workflow: str) -> tuple[str, str]:
    """(name, experiment) of a run, from the environment a sweep sets, else its folder and workflow."""
    return os.environ.get(RUN_NAME_ENV) or out.resolve().name, os.environ.get(EXPERIMENT_ENV) or workflow


class Tracker(ABC):
    """One tracker's run. `run_id` (None: none to keep) is stored in OUT/trackers.json, so a resumed run
    continues it; `keeps_files`: it takes files (the graph, the plots), so the run writes them."""

    run_id: str | None = None
    keeps_files: bool = True

    @abstractmethod
    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Scalars by key (`tracked_metrics`) at `step`."""

    def log_files(self, files: Sequence[Path], base: Path) -> None:  # noqa: B027 - optional
        """Keep `files` with the run, each under its path relative to the folder `base`."""

    @abstractmethod
    def finish(self, failed: bool) -> None:
        """End the run (`failed`: it stopped on an error)."""


def tracked_metrics(row: Mapping[str, object], prefix: str) -> dict[str, float]:
    """A metrics.jsonl (`train`) or eval.jsonl (`eval`) row as `PREFIX/KEY -> value`: every number but
    `step`, nested mappings flattened with `/`."""
    return {f"{prefix}/{key}": value for key, value in _numbers(row) if key != "step"}


def _numbers(row: Mapping[str, object], at: str = "") -> Iterator[tuple[str, float]]:
    for key, value in row.items():
        if isinstance(value, Mapping):
            yield from _numbers(value, f"{at}{key}/")
        elif isinstance(value, (int, float)):
            yield f"{at}{key}", float(value)


def flat_config(config: Mapping[str, object], at: str = "") -> dict[str, str]:
    """The run's config as `key.subkey -> text` (MLflow's params); lists as JSON text."""
    import json

    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            out |= flat_config(value, f"{at}{key}.")
        else:
            out[f"{at}{key}"] = value if isinstance(value, str) else json.dumps(value)
    return out
