"""`srpo-dsl train` with rollout workers and no launcher: the same command again, under torch's launcher.

With `rollout_workers = R` a run is 1 + R processes (one trainer rank, R workers,
`rl/rollout_link.py`). Started without `torchrun` or `deepspeed`, the command hands itself to
torch's elastic launcher (what `torchrun --standalone` runs) and exits with the code of the
first process that failed. The threads of this machine are shared out between the processes.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def processes_needed(workflow: Path, overrides: Mapping[str, Any]) -> int:
    """1 + R when the run has R rollout workers and no launcher started this process; else 0."""
    if "RANK" in os.environ:
        return 0
    from srpo_dsl.rl.trainer import resolve_options
    from srpo_dsl.runtime.setup import load_workflow

    wf = load_workflow(workflow)
    workers = resolve_options(wf.graph.train, overrides, wf.folder).rollout_workers
    return 1 + workers if workers else 0


def relaunch(processes: int) -> int:
    """Run this command as `processes` processes on this machine; the exit code of the first that failed."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    cores = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    os.environ["OMP_NUM_THREADS"] = str(max(1, cores // processes))
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)  # a failure is the child's line
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=processes,
        run_id=f"srpo-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=0.2,
    )
    try:
        elastic_launch(config, sys.executable)("-m", "srpo_dsl", *sys.argv[1:])
    except ChildFailedError as exc:
        return next(iter(exc.failures.values())).exitcode or 1
    return 0
