"""The plan on disk: what the processes of a launch read in place of a command line (`OUT/.plan.json`).

The process that planned a run (`plan.make_plan`) and starts its processes (the self-launch of 1 + R
processes, `api.launch`; the Ray actors, `api.ray_launch`) writes the frozen `TrainPlan` once into the run
folder (`planned`), and each process it starts reads it back (`read_plan`): none of them parses, checks,
compiles or plans the workflow again. The event graph travels compiled; the user's Python it names is
imported where it runs, as ever. The run folder is where the plan goes because every process of a run
reaches it: on many nodes `--out` must be shared, as every trainer rank writes its part of a checkpoint
there. The file lives as long as the launch: `--resume` plans anew, and its launch writes its own.

Under a launcher of the user's (`torchrun`, `deepspeed`: each process runs `srpo-dsl train`), rank 0
parses, checks and plans, and hands the same JSON to the other ranks through the launch's rendezvous
store (`api.training.handed_plan`); they parse and plan nothing, and when rank 0 could not plan, it
says why and the others end in silence.

JSON, versioned (`FORMAT`), written and read through pydantic's schema of the plan's own types: no pickle,
nothing but data. Importing this module loads no torch.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from srpo_dsl.devices import resolve_device
from srpo_dsl.io import write_atomic
from srpo_dsl.rl.loop.plan import TrainError, TrainPlan, check_backend
from srpo_dsl.runfolder import PLAN

if TYPE_CHECKING:  # pydantic loads when a plan is read or written
    from pydantic import TypeAdapter

FORMAT = "srpo-plan/1"  # the file's version: a process reads only the plans its own srpo-dsl writes


@cache
def _adapter() -> TypeAdapter[TrainPlan]:
    """pydantic's reader and writer of a `TrainPlan` (built once per process, when first needed)."""
    from pydantic import TypeAdapter

    return TypeAdapter(TrainPlan)


def plan_json(plan: TrainPlan) -> str:
    """The plan as the file holds it."""
    return json.dumps({"format": FORMAT, "plan": _adapter().dump_python(plan, mode="json")}) + "\n"


def plan_from_json(text: str, where: Path) -> TrainPlan:
    """The plan a file's `text` holds (`where`: the file, for the error line)."""
    from pydantic import ValidationError

    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise TrainError(f"{where}: not a plan this srpo-dsl reads ({FORMAT})")
        return _adapter().validate_python(data["plan"])
    except (ValueError, KeyError, ValidationError) as exc:
        if isinstance(exc, TrainError):
            raise
        raise TrainError(f"{where}: not a plan this srpo-dsl reads ({FORMAT}): {exc}") from None


@contextmanager
def planned(plan: TrainPlan) -> Iterator[None]:
    """The plan written into its run folder (created if absent) for the block: the file the launch's
    processes read. Afterwards the file is removed, and the folder too if this made it and it is empty."""
    created = not plan.out.exists()
    path = plan.out / PLAN
    write_atomic(path, plan_json(plan))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        if created:
            with suppress(OSError):
                plan.out.rmdir()


def read_plan(out: Path) -> TrainPlan:
    """The plan a launch's process carries out, read from the run folder `out`: it starts no process of its
    own; on Ray, it uses its node's device and checks its node's rollout engine (the planner's node may
    differ)."""
    path = Path(out) / PLAN
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TrainError(f"cannot read the run's plan {path}: {exc.strerror or exc}") from None
    plan = plan_from_json(text, path)
    if plan.setup.ray is None:
        return dataclasses.replace(plan, processes=0)
    setup = dataclasses.replace(plan.setup, ray=None)
    device = resolve_device(setup.device)
    check_backend(setup.backend, device)
    return dataclasses.replace(plan, setup=setup, device=device, processes=0)
