"""Weights & Biases: `wandb.init` configured by its own environment variables (WANDB_API_KEY, WANDB_MODE,
WANDB_DIR, WANDB_PROJECT, WANDB_ENTITY, WANDB_RUN_GROUP, WANDB_NAME, ...). Project: $WANDB_PROJECT, else
`srpo-dsl`; group: $WANDB_RUN_GROUP, else the run's experiment (a sweep's name, else the workflow's);
name: $WANDB_NAME, else the run's name. The run's config is the W&B config; the graph and the plots are
run files. A resumed run continues the W&B run of OUT/trackers.json (W&B ignores steps it already has)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from srpo_dsl.trackers.base import TrackedRun, Tracker

PROJECT = "srpo-dsl"  # without WANDB_PROJECT
INIT_TIMEOUT = 30.0  # seconds `wandb.init` waits for its server (W&B's: 90), unless WANDB_INIT_TIMEOUT


class Wandb(Tracker):
    def __init__(self, run: TrackedRun):
        import wandb

        settings = wandb.Settings(
            console=os.environ.get("WANDB_CONSOLE", "off"),  # srpo-dsl's own output stays where it is
            init_timeout=float(os.environ.get("WANDB_INIT_TIMEOUT", INIT_TIMEOUT)),
        )
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", PROJECT),
            group=os.environ.get("WANDB_RUN_GROUP", run.experiment),
            name=os.environ.get("WANDB_NAME", run.name),
            config=dict(run.config),
            id=run.resume_id,
            resume="allow" if run.resume_id else None,
            settings=settings,
            reinit="create_new",
        )
        self.run_id = self.run.id

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_files(self, files: Sequence[Path], base: Path) -> None:
        for path in files:
            self.run.save(str(path), base_path=str(base), policy="now")

    def finish(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)
