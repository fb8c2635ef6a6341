"""`Workflow.train`: train a workflow's policies into a run folder, and the `Run` it returns.

In one process (no launcher, no rollout workers) training runs in the caller's process and leaves nothing
behind: the process group it made is destroyed, its engines and threads are gone, so a notebook can train
again. Rollout workers need processes of their own: the run is then started as `srpo-dsl train`, 1 + R
processes (`api.launch`), and this call waits for it; with `launcher="ray"` every process is a Ray actor
on an existing cluster (`api.ray_launch`).
"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from srpo_dsl.api.quiet import libraries_quiet
from srpo_dsl.api.rollouts import check_tools
from srpo_dsl.api.runs import Run, read_run_file
from srpo_dsl.arguments import checked
from srpo_dsl.errors import InputError, UsageError
from srpo_dsl.lang.syntax.messages import WorkflowError
from srpo_dsl.rl.loop.plan import TrainPlan  # `train_plan`'s argument is checked against it
from srpo_dsl.runfolder import METRICS, read_jsonl
from srpo_dsl.runlock import owning

if TYPE_CHECKING:
    from srpo_dsl.rl.loop.plan import RayLaunch, Setup
    from srpo_dsl.runtime.setup import CompiledWorkflow

__all__ = ["train_plan"]  # the public name of this module (docs/python.md); the rest serves `Workflow`

OUT_OF_MEMORY = (
    "out of GPU memory: use a higher --zero stage, --offload optimizer (or all with --zero 3), "
    "more --micro-batches, a smaller --batch or --group, shorter max_tokens, or --decode dynamic"
)


def plan_training(
    wf: CompiledWorkflow, out: Path, options: Mapping[str, object], resume: bool, setup: Setup, verbose: bool
) -> TrainPlan:
    """The run's plan, once, with every check before anything loads: the option names, then the plan's own
    checks (`rl.loop.plan.make_plan`: files, run folder, options, device, rollout engine, policies), then
    whether each tool's server answers."""
    from srpo_dsl.rl.loop.plan import make_plan

    overrides = checked_options(options)
    if setup.ray is not None:  # the device is the cluster's
        from srpo_dsl.api.ray_launch import on_cluster

        setup = on_cluster(setup)
    with libraries_quiet(not verbose), training_errors(wf.path):
        plan = make_plan(wf, out, overrides, resume, setup)
    check_tools(wf)
    return plan


def launched_plan(out: Path) -> TrainPlan:
    """The plan a process of a launch carries out, as the process that launched it wrote it into the run
    folder `out` (`rl.loop.plan_io`): read, not planned again; a plan it cannot read is one line."""
    from srpo_dsl.rl.loop.plan_io import read_plan

    with training_errors(out):
        return read_plan(out)


def handed_plan(make: Callable[[], TrainPlan]) -> TrainPlan | None:
    """The run's plan: `make()` without a launcher; under torchrun or `deepspeed`, rank 0's `make()`, handed
    to the other ranks as the JSON `rl.loop.plan_io` writes, through the launch's rendezvous store: they
    parse and plan nothing. None on them when rank 0 made none: its own error says why, and its launcher
    stops them (their wait ends in silence)."""
    if "RANK" not in os.environ:
        return make()
    from srpo_dsl.rl.distributed.process_group import launch_store
    from srpo_dsl.rl.loop.plan_io import plan_from_json, plan_json

    key = f"srpo-plan/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"  # a torchrun restart plans anew
    if os.environ["RANK"] == "0":
        plan = make()  # first: a plan it cannot make ends it before it waits for the other ranks
        with training_errors(plan.workflow.path):
            launch_store().set(key, plan_json(plan))
        return plan
    with training_errors(Path(key)):
        store = launch_store()
    try:
        text = store.get(key).decode()
    except RuntimeError:  # the store went away with rank 0
        return None
    with training_errors(Path(key)):  # another srpo-dsl's plan (another node's install): one line
        return plan_from_json(text, Path(f"rank 0's plan ({key})"))


@checked
def train_plan(plan: TrainPlan, progress: bool = True, verbose: bool = False) -> Run:
    """Train as planned: here, or as 1 + R processes when the run has rollout workers and no launcher
    (whose launcher owns the run folder, `api.launch.launch`), or as Ray actors (`launcher="ray"`, whose
    rank 0 owns it); here, this process owns it meanwhile (`runlock`: a second writer is refused)."""
    if plan.processes:
        return launched(plan, verbose, progress)
    with owning(plan.out), libraries_quiet(not verbose), training_errors(plan.workflow.path), released():
        from srpo_dsl.rl.loop.trainer import train  # quiet: imports transformers

        return Run(plan.out, train(plan, progress))


def ray_setup(
    launcher: str | None, address: str | None, processes: int | None, cpus: int
) -> RayLaunch | None:
    """The Ray launch asked for (`launcher="ray"`), checked; None for none (the `ray_...` settings must
    then be left out)."""
    from srpo_dsl.choices import LAUNCHERS
    from srpo_dsl.rl.loop.plan import RayLaunch

    if launcher is None:
        if address is not None or processes is not None or cpus != 1:
            raise UsageError("--ray-address, --ray-processes and --ray-cpus go with --launcher ray")
        return None
    if launcher not in LAUNCHERS:
        raise UsageError(f"launcher {launcher!r}: expected one of {', '.join(LAUNCHERS)} (or none)")
    if (processes is not None and processes < 1) or cpus < 1:
        raise UsageError("--ray-processes and --ray-cpus: at least 1")
    from srpo_dsl.api.ray_launch import default_address

    return RayLaunch(default_address(address), processes, cpus)


def checked_options(options: Mapping[str, object]) -> dict[str, object]:
    """`train with` options by name, each one of `TrainOptions` (the trainer checks the values; a bool is
    refused here for an option that is not one, which pydantic would read as 0 or 1)."""
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.lang.syntax.messages import did_you_mean

    for name in options:
        if name not in TrainOptions.model_fields:
            hint = did_you_mean(name, TrainOptions.model_fields)
            raise UsageError(f"no training option `{name}`" + (f" ({hint})" if hint else ""))
        takes = TrainOptions.model_fields[name].annotation
        if isinstance(options[name], bool) and "bool" not in str(takes):  # (pydantic reads True as 1)
            raise UsageError(
                f"training option `{name}` takes {getattr(takes, '__name__', takes)}, not {options[name]}"
            )
    return {k: getattr(v, "value", v) for k, v in options.items()}


@contextmanager
def training_errors(workflow: Path) -> Iterator[None]:
    """Every training failure the user can fix, as one typed exception with a one-line message."""
    import torch

    from srpo_dsl.backends.base import BackendError
    from srpo_dsl.envs.retrieval import RetrieverError
    from srpo_dsl.lang.syntax.messages import SrpoError
    from srpo_dsl.rl.loop.plan import TrainError

    try:
        yield
    except SrpoError as err:
        raise WorkflowError.of(workflow, err.diagnostics) from None
    except (TrainError, BackendError, RetrieverError, ValueError, OSError) as exc:
        raise UsageError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    except torch.cuda.OutOfMemoryError:
        raise InputError(OUT_OF_MEMORY) from None


@contextmanager
def released() -> Iterator[None]:
    """Training alone in this process: afterwards its process group is destroyed and the launch variables
    it set are unset (the next run makes its own), and the memory of its engines is returned."""
    from srpo_dsl.launched import LAUNCH_VARIABLES
    from srpo_dsl.rl.distributed.process_group import destroy_distributed

    alone = "RANK" not in os.environ
    saved = {k: os.environ.get(k) for k in LAUNCH_VARIABLES}
    try:
        yield
    finally:
        if alone:
            destroy_distributed()
            restore_environment(saved)
        gc.collect()
        empty_cuda_cache()


def restore_environment(saved: Mapping[str, str | None]) -> None:
    """Each variable as it was (None: unset)."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def launched(plan: TrainPlan, verbose: bool, progress: bool) -> Run:
    """The run as `srpo-dsl train`, 1 + R processes (on Ray: its actors), their output relayed to
    `sys.stdout` and `sys.stderr` (`api.relay`); its error line, if it fails, as an `InputError`; a Ctrl-C
    that stopped them as a `KeyboardInterrupt`."""
    from srpo_dsl.api.launch import launch
    from srpo_dsl.api.relay import Outputs, relayed

    before = len(read_run_file(lambda: read_jsonl(plan.out / METRICS)))
    with relayed() as relay:
        code = launch(plan, Outputs(relay.stdout, relay.stderr, progress), verbose=verbose)
    if code == 128 + signal.SIGINT:  # a Ctrl-C, passed on to the processes: the caller's interrupt
        raise KeyboardInterrupt
    if code != 0:
        said = relay.errors[0].removeprefix("error: ") if relay.errors else f"exit code {code}"
        raise InputError(f"training in {plan.processes} processes (`srpo-dsl train`) failed: {said}")
    return Run(plan.out, read_run_file(lambda: read_jsonl(plan.out / METRICS))[before:])
