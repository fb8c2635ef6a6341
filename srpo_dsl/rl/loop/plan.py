"""The plan of a training run: everything decided before anything heavy loads, decided once.

Importing it loads no torch: the dry run and the CLI read a plan without the trainer.

`make_plan` takes a compiled workflow and the caller's choices, runs every check that can fail
before a model, a process group or the user's Python loads (the options, the device, the rollout
engine, the policies, the files, the run folder), and returns a frozen `TrainPlan`. The trainer, the
launcher, the dry run and the CLI read it; none of them compiles the workflow or resolves an option
again. The processes a launch starts read it from the run folder (`plan_io`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srpo_dsl.arguments import one_of
from srpo_dsl.choices import DECODE_MODES, OFFLOAD
from srpo_dsl.devices import resolve_device
from srpo_dsl.errors import InputError, UsageError
from srpo_dsl.io import not_utf8
from srpo_dsl.jsonvalue import JsonObject, JsonValue
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.usercode.pycode import UseName, is_reference
from srpo_dsl.outputs import check_files, check_sources, check_writable, refuse_existing
from srpo_dsl.registries import rollout_engine_problem
from srpo_dsl.rl.distributed.ds_import import import_deepspeed
from srpo_dsl.runlock import check_free
from srpo_dsl.runtime.setup import CompiledWorkflow

if TYPE_CHECKING:
    from srpo_dsl.rl.engines.policies import Rollout


class TrainError(Exception):
    """A training run that cannot start or go on; the message is one line for the user."""


@dataclass(frozen=True)
class RayLaunch:
    """A run started as Ray actors on an existing Ray cluster (`api.ray_launch`): one per process."""

    address: str  # `ray.init`'s: HOST:PORT of the cluster's head, or `auto`
    processes: int | None = None  # trainer ranks and rollout workers (WORLD_SIZE); None: 1 + rollout_workers
    cpus: int = 1  # CPUs of each process's bundle (its OMP_NUM_THREADS)


@dataclass(frozen=True)
class Setup:
    """Where and how a run trains, as the caller chose it (everything but the `train with` options)."""

    models: Mapping[str, str] = field(default_factory=dict)  # policy -> model path or spec
    eval_data: tuple[Path, ...] = ()  # held-out files in place of the task's eval split
    device: str | None = None  # None: cuda when there is one
    backend: str = "hf"  # the rollout engine (`ROLLOUT_ENGINES`)
    decode: str = "auto"  # the hf engine's decode loop
    ds_config: Path | None = None  # JSON merged over the DeepSpeed config
    offload: str = "none"
    ray: RayLaunch | None = None  # started on a Ray cluster; its device is the cluster's, already decided


@dataclass(frozen=True)
class TrainPlan:
    """A training run, checked: the workflow, its resolved options, where and how it trains, and how many
    processes this call starts (`processes`: 0 = it trains here or was started by a launcher; on Ray, its
    actors)."""

    workflow: CompiledWorkflow
    out: Path
    overrides: Mapping[str, object]  # the options given in place of the file's, as given (pydantic: any
    # value, as JsonValue's recursion is not one it builds a schema of)
    opts: TrainOptions  # the file's `train with (...)` with the overrides
    resume: bool
    setup: Setup
    device: str  # the device it uses: setup.device, or the machine's default
    ds_overrides: Mapping[str, object]  # the user's DeepSpeed JSON, read
    processes: int

    @property
    def rollout(self) -> Rollout:
        from srpo_dsl.rl.engines.policies import Rollout

        return Rollout(self.setup.backend, self.setup.decode)


def make_plan(
    wf: CompiledWorkflow,
    out: Path,
    overrides: Mapping[str, JsonValue] | None = None,
    resume: bool = False,
    setup: Setup = Setup(),
) -> TrainPlan:
    """Check everything that can be checked before anything loads, in the order a user fixes it, and
    return the plan. Raises `TrainError` (one line) or the `UsageError` of a file or folder."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    check_choices(setup)
    check_files([setup.ds_config])
    check_sources(setup.eval_data)
    check_out(out, resume)
    check_writable(out)
    opts = resolve_options(wf.graph.train, overrides, wf.folder)
    if opts.pack_rows is None:  # on where a conversation's turns can be scored in one pass
        opts = opts.model_copy(update={"pack_rows": any(a.observe for a in wf.graph.agents.values())})
    device = resolve_device(setup.device) if setup.ray is None else str(setup.device)
    if setup.ray is None:  # on Ray, each process checks its own node's engine
        check_backend(setup.backend, device)
    check_trainable(wf)
    check_checkpointing(wf, opts)
    check_eval_names(setup.eval_data)
    ds_overrides = read_ds_config(setup.ds_config) if setup.ds_config else {}
    processes = launch_processes(opts.rollout_workers, setup.ray)
    return TrainPlan(wf, Path(out), overrides, opts, resume, setup, device, ds_overrides, processes)


def check_choices(setup: Setup) -> None:
    """Each setting of a fixed list of values is one of them (the CLI's choices come from the same lists):
    the Python API's `plan(offload="two")` is refused here, before anything loads."""
    one_of("offload", setup.offload, OFFLOAD)
    one_of("decode", setup.decode, DECODE_MODES)


def check_out(out: Path, resume: bool) -> None:
    """A folder another live run writes is refused naming that run (`runlock`), whatever it holds; a
    folder holding files is refused without `resume`."""
    try:
        check_free(out)
        if not resume:
            refuse_existing(out, "pass --resume to continue the run in it, or choose another --out")
    except UsageError:
        check_free(out)  # a run that started meanwhile wrote what is there: it is the answer
        raise


def launch_processes(workers: int, ray: RayLaunch | None) -> int:
    """The processes this call starts: on Ray, every one (`ray.processes`, else 1 + R); without a launcher,
    1 + R with R rollout workers (else none: it trains here); under a launcher, none (ValueError when the
    launcher started too few for R workers and a trainer)."""
    launched = "RANK" in os.environ  # a launcher started this process: it starts no other
    if launched and ray is None:
        from srpo_dsl.rl.transport.link import LaunchLayout

        LaunchLayout.from_env(workers)
    if ray is None:
        return 1 + workers if workers and not launched else 0
    if launched:
        raise TrainError("--launcher ray: this process was started by a launcher already (RANK is set)")
    processes = ray.processes or 1 + workers
    if processes <= workers:
        raise TrainError(
            f"--ray-processes {processes}: rollout_workers = {workers} needs at least {workers + 1} "
            "processes (one trainer)"
        )
    return processes


def resolve_options(
    train_block: TrainOptions, overrides: Mapping[str, JsonValue], folder: Path
) -> TrainOptions:
    """The workflow's `train` options with `overrides` applied (validated; the Python code an override names
    is read with `ast` from `folder`, as validate reads the workflow's own)."""
    from pydantic import ValidationError

    unknown = set(overrides) - set(TrainOptions.model_fields)
    if unknown:
        raise TrainError(f"unknown training option(s): {', '.join(sorted(unknown))}")
    try:
        opts = TrainOptions(**{**train_block.model_dump(), **overrides})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise TrainError(f"training option `{'.'.join(map(str, err['loc']))}`: {err['msg']}") from None
    check_user_parts(opts, overrides, folder)
    return opts


def check_user_parts(opts: TrainOptions, overrides: Mapping[str, JsonValue], folder: Path) -> None:
    """The Python an override names resolves (read with `ast`), and the objective takes the advantage
    asked for; the objective's module (torch) is imported only when there is something to check."""
    uses: tuple[UseName, ...] = ("objective", "advantage")
    named = {use: ref for use in uses if isinstance(ref := overrides.get(use), str) and is_reference(ref)}
    if named:
        from srpo_dsl.rl.objective.plugins import locate

        for use, ref in named.items():
            locate(ref, use, folder)  # a one-line ValueError if it does not resolve
    if opts.advantage and not is_reference(opts.objective):  # before any file is written
        from srpo_dsl.rl.objective.losses import get_objective
        from srpo_dsl.rl.objective.plugins import check_episode_advantage

        check_episode_advantage(get_objective(opts.objective), opts.advantage)


def check_backend(backend: str, device: str) -> None:
    """The rollout engine can be built here, as its entry declares (`rollout_engine_problem`)."""
    if problem := rollout_engine_problem(backend, device):
        raise TrainError(problem)


def check_trainable(wf: CompiledWorkflow) -> None:
    """At least one agent of a trainable policy is trained."""
    if not any(p.trainable for p in wf.graph.policies.values()):
        raise TrainError(f"{wf.path}: no trainable policy (every policy is `frozen`)")
    if not any(a.trained and wf.graph.policies[a.policy].trainable for a in wf.graph.agents.values()):
        raise TrainError(f"{wf.path}: no agent of a trainable policy is trained (each has `trained = false`)")


def check_checkpointing(wf: CompiledWorkflow, opts: TrainOptions) -> None:
    """Gradient checkpointing replays a layer in the backward pass, where no adapter is routed any more:
    not with `adapter(...)` policies (yet)."""
    adapters = [name for name, p in wf.graph.policies.items() if p.base is not None]
    if opts.gradient_checkpointing and adapters:
        raise TrainError(
            f"gradient_checkpointing does not work with adapter(...) policies yet ({', '.join(adapters)}): "
            "train without it, or give each role its own lora(...) policy"
        )


def check_eval_names(eval_data: Sequence[Path]) -> None:
    """Held-out files are named by their stems in eval.jsonl: the stems must differ."""
    names = [Path(p).stem for p in eval_data]
    if len(set(names)) < len(names):
        raise TrainError(f"held-out data files need distinct names: {', '.join(map(str, eval_data))}")


def read_ds_config(path: Path) -> JsonObject:
    """User overrides from a JSON file (ValueError with a one-line reason)."""
    try:
        data: JsonValue = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"cannot read {path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read {path}: {not_utf8(exc)}") from None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a DeepSpeed config must be a JSON object")
    check_ds_optimizer(data, path)
    return data


def check_ds_optimizer(config: Mapping[str, JsonValue], path: Path) -> None:
    """The `optimizer` a DeepSpeed config names is one DeepSpeed builds (its own, by name in any case, or a
    `torch.optim` class, as `DeepSpeedEngine` accepts): else an `InputError` naming the file. DeepSpeed's
    list is read (imported) only for a config that names an optimizer."""
    if "optimizer" not in config:
        return
    section = config["optimizer"]
    name = section.get("type") if isinstance(section, dict) else None
    if not isinstance(name, str):
        raise InputError(
            f'{path}: "optimizer" must be an object with a "type": '
            '{"type": "AdamW", "params": {"lr": 1e-5}}'
        )
    import torch

    import_deepspeed()
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    if name.lower() not in DEEPSPEED_OPTIMIZERS and not isinstance(getattr(torch.optim, name, None), type):
        raise InputError(
            f"{path}: DeepSpeed has no optimizer `{name}`: one of {', '.join(DEEPSPEED_OPTIMIZERS)}, "
            "or a torch.optim class (e.g. SGD)"
        )


def plan_file(
    path: Path,
    out: Path,
    overrides: Mapping[str, JsonValue] | None = None,
    resume: bool = False,
    *,
    settings: Mapping[str, JsonValue] | None = None,
    **setup: Any,
) -> TrainPlan:
    """`make_plan` for the workflow file at `path`, compiled here, with `Setup`'s fields as keywords: for
    Python below the API (benchmarks, the trainer's own tests). The API plans with `Workflow.plan`."""
    from srpo_dsl.runtime.setup import load_workflow

    return make_plan(load_workflow(Path(path), settings), Path(out), overrides, resume, Setup(**setup))
