"""MLflow, through `MlflowClient` configured by MLflow's own environment variables (MLFLOW_TRACKING_URI,
MLFLOW_TRACKING_USERNAME/PASSWORD, ...). Experiment: $MLFLOW_EXPERIMENT_NAME, else the run's experiment
(a sweep's name, else the workflow's); run name: the run's name. The run's config is flattened into params
(`options.lr`, `ds_config.zero_optimization.stage`, ...); config.json, the graph and the plots are
artifacts. A resumed run continues the MLflow run of OUT/trackers.json when the server still
has it.

A server that does not answer must not hold the run for minutes: unless set, MLflow's HTTP requests are
retried twice (its default: 7 times, with backoff), one second apart, and wait 10 s each (default 120 s).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from srpo_dsl.trackers.base import TrackedRun, Tracker, flat_config

if TYPE_CHECKING:
    from mlflow import MlflowClient

HTTP_DEFAULTS = {  # set when the user has not
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
UNSAFE = re.compile(r"[^\w\-. :/]")  # characters MLflow refuses in a metric name


class MLflow(Tracker):
    def __init__(self, run: TrackedRun):
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        self.run_id = self._resumed(run.resume_id) or self._created(run)
        if run.resume_id != self.run_id:  # a new run: its params (a resumed one keeps its first)
            params = [Param(k, v) for k, v in flat_config(run.config).items()]
            self.client.log_batch(self.run_id, params=params)

    def _resumed(self, run_id: str | None) -> str | None:
        """`run_id`, running again, when the server has it."""
        from mlflow.exceptions import MlflowException

        if run_id is None:
            return None
        try:
            self.client.update_run(run_id, status="RUNNING")
        except MlflowException:
            return None
        return run_id

    def _created(self, run: TrackedRun) -> str:
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or run.experiment
        created = self.client.create_run(experiment_id(self.client, name), run_name=run.name)
        return created.info.run_id

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows = [Metric(UNSAFE.sub("_", k), v, now, step) for k, v in metrics.items()]
        self.client.log_batch(self.run_id, metrics=rows)

    def log_files(self, files: Sequence[Path], base: Path) -> None:
        for path in files:
            folder = path.parent.relative_to(base).as_posix()
            self.client.log_artifact(self.run_id, str(path), None if folder == "." else folder)

    def finish(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of the experiment `name`, created if there is none (another run may create it meanwhile:
    a sweep's cells start together)."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except MlflowException:
        return client.get_experiment_by_name(name).experiment_id
