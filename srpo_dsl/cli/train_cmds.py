"""`srpo-dsl train` and `srpo-dsl plot`: train a workflow's policies, draw its training dynamics.

`train` is `Workflow.train` (`srpo_dsl.api`) with the flags as its arguments; with rollout workers and
no launcher it starts itself as 1 + R processes (`api.launch`). Choices come from their one source (the
registries of `srpo_dsl.registries`, the fixed settings of `srpo_dsl.choices`), never restated here.
Unless `--verbose`, what the libraries report while training is hidden (`api.quiet`); srpo-dsl's own
progress bar (stderr) stays, and the run ends with the held-out result.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from srpo_dsl.api.dry_run import launch_table
from srpo_dsl.api.launch import launch
from srpo_dsl.api.quiet import libraries_quiet
from srpo_dsl.api.runs import PLOTS, SMOOTHING, Run, export_checkpoint, write_plots
from srpo_dsl.api.training import handed_plan, launched_plan, train_plan
from srpo_dsl.argranges import BOUNDS
from srpo_dsl.choices import LAUNCHERS, OFFLOAD
from srpo_dsl.cli.common import (
    DECODE,
    EXIT_INPUT,
    OVERWRITE,
    SET,
    SOURCES,
    CliError,
    Decode,
    Device,
    choices,
    interrupted,
)
from srpo_dsl.cli.run_cmds import load_checked, models_of
from srpo_dsl.cli.watch import training
from srpo_dsl.console import note
from srpo_dsl.errors import UsageError
from srpo_dsl.registries import OBJECTIVES, ROLLOUT_ENGINES, SET_NORMS
from srpo_dsl.stopping import STOPPING, Stopped, stopped_by, stopping_on_signals

if TYPE_CHECKING:
    from srpo_dsl.api.runs import EvalCurve
    from srpo_dsl.api.training import TrainPlan

Objective = choices("Objective", OBJECTIVES)
SetNorm = choices("SetNorm", SET_NORMS)
Offload = choices("Offload", OFFLOAD)
RolloutEngine = choices("RolloutEngine", ROLLOUT_ENGINES)
Launcher = choices("Launcher", LAUNCHERS)

WORKFLOW = typer.Argument(..., help="A workflow file (*.srpo).", show_default=False)
OUT = typer.Option(Path("runs/train"), "--out", help="Run folder (metrics, eval, tb, checkpoints).")
STEPS = typer.Option(None, "--steps", help="Training steps (rollout batches).")
OBJECTIVE = typer.Option(
    None,
    "--objective",
    help='The policy loss (SRPO or a baseline); a Python one: --option objective="f.py:fn".',
)
SET_NORM = typer.Option(None, "--set-norm", help="SRPO's set reduction c(K): K^-1/2, 1/K or 1.")
LR = typer.Option(None, "--lr", help="Learning rate.")
GROUP = typer.Option(None, "--group", "-G", help="Rollouts per prompt (G).")
BATCH = typer.Option(None, "--batch", help="Prompts per step.")
ZERO = typer.Option(None, "--zero", help="DeepSpeed ZeRO stage (0-3).")
MICRO = typer.Option(None, "--micro-batches", help="Event-atomic micro-batches per optimizer step.")
DS_CONFIG = typer.Option(None, "--ds-config", help="JSON merged over the DeepSpeed config.")
OFFLOAD_OPT = typer.Option(Offload.none, "--offload", help="ZeRO offload to CPU.")
MODEL = typer.Option(
    [], "--model", help="Override a policy's model: PATH (all policies) or POLICY=PATH; repeatable."
)
OPTION = typer.Option(
    [],
    "--option",
    help="Any `train with (...)` option as NAME=VALUE (e.g. clip=0.1); repeatable; a flag wins.",
)
EVAL_DATA = typer.Option(
    [],
    "--eval-data",
    help=f"Held-out data in place of the task's eval split, repeat for several: {SOURCES}.",
)
RESUME = typer.Option(False, "--resume", help="Continue from the latest checkpoint in --out.")
SEED = typer.Option(None, "--seed", help="Seed of data order and sampling.")
DEVICE = typer.Option(None, "--device", help="Default: cuda when available.")
BACKEND = typer.Option(
    RolloutEngine.hf, "--backend", help="Rollout engine: hf (in-process) or vllm (colocated on the GPU)."
)
DRY_RUN = typer.Option(
    False,
    "--dry-run",
    help="Print each process's role, node and device and exit, loading no model (under a launcher: once "
    "every rank has joined one gloo group, which checks that the nodes reach each other).",
)

LAUNCHER = typer.Option(
    None,
    "--launcher",
    help="ray: run every trainer rank and rollout worker as a Ray actor on an existing Ray cluster "
    "(default: this process, or 1 + R processes on this machine).",
)
RAY_ADDRESS = typer.Option(
    None,
    "--ray-address",
    help="The Ray cluster to join (HOST:PORT of its head); default: RAY_ADDRESS, else this node's cluster.",
)
RAY_PROCESSES = typer.Option(
    None,
    "--ray-processes",
    **BOUNDS["ray_processes"].option(),
    help="Processes (Ray actors) of the run, the last rollout_workers of them workers; default 1 + those.",
)
RAY_CPUS = typer.Option(
    1,
    "--ray-cpus",
    **BOUNDS["ray_cpus"].option(),
    help="CPUs of each process's Ray bundle (its OMP_NUM_THREADS).",
)


def train_cmd(
    workflow: Path = WORKFLOW,
    out: Path = OUT,
    steps: int | None = STEPS,
    objective: Objective | None = OBJECTIVE,
    set_norm: SetNorm | None = SET_NORM,
    lr: float | None = LR,
    group: int | None = GROUP,
    batch: int | None = BATCH,
    zero: int | None = ZERO,
    micro_batches: int | None = MICRO,
    ds_config: Path | None = DS_CONFIG,
    offload: Offload = OFFLOAD_OPT,
    model: list[str] = MODEL,
    option: list[str] = OPTION,
    eval_data: list[Path] = EVAL_DATA,
    resume: bool = RESUME,
    seed: int | None = SEED,
    device: Device | None = DEVICE,
    backend: RolloutEngine = BACKEND,
    decode: Decode = DECODE,
    dry_run: bool = DRY_RUN,
    launcher: Launcher | None = LAUNCHER,
    ray_address: str | None = RAY_ADDRESS,
    ray_processes: int | None = RAY_PROCESSES,
    ray_cpus: int = RAY_CPUS,
    setting: list[str] = SET,
    verbose: bool = False,
) -> None:
    """Train a workflow's trainable policies with SRPO (or a baseline); flags override its `train` block.

    Writes OUT/metrics.jsonl, eval.jsonl, config.json, tb/ (TensorBoard) and checkpoints/step-N, and ends with
    the held-out Avg@k / Pass@k of the first and last evaluation. `--resume` continues it; torchrun: many.

    Examples:

      srpo-dsl train workflows/quickstart.srpo --out runs/q1

      srpo-dsl train workflows/search_k5_sqrt.srpo --objective srpo --set-norm mean --zero 2 --micro-batches 4

      srpo-dsl train workflows/quickstart.srpo --option clip=0.1 --option eval_every=10 --out runs/q3

      torchrun --nproc_per_node 2 -m srpo_dsl train workflows/quickstart.srpo --zero 3 --out runs/q2

      srpo-dsl train workflows/quickstart.srpo --launcher ray --ray-processes 2 --zero 3 --out runs/q4
    """
    flags = {"steps": steps, "lr": lr, "group": group, "batch": batch, "zero": zero, "seed": seed}
    flags |= {"micro_batches": micro_batches, "objective": objective, "set_norm": set_norm}
    overrides = parse_options(option) | {k: getattr(v, "value", v) for k, v in flags.items() if v is not None}
    setup = {"eval_data": eval_data, "ds_config": ds_config, "device": device and device.value}
    setup |= {"offload": offload.value, "backend": backend.value, "decode": decode.value}
    setup |= {"launcher": launcher and launcher.value, "ray_address": ray_address}
    setup |= {"ray_processes": ray_processes, "ray_cpus": ray_cpus}

    def make() -> TrainPlan:
        wf = load_checked(workflow, setting)
        return wf.plan(out, resume=resume, models=models_of(model, wf), verbose=verbose, **setup, **overrides)

    carry_out(planned_once(make), dry_run, verbose)


def planned_once(make: Callable[[], TrainPlan]) -> TrainPlan:
    """`make()`'s plan; under torchrun or `deepspeed`, rank 0's, handed to the other ranks, which plan
    nothing (`api.training.handed_plan`); one whose rank 0 could not plan ends in silence (rank 0 says)."""
    plan = handed_plan(make)
    if plan is None:
        raise CliError("rank 0 made no plan", EXIT_INPUT, shown="")
    return plan


def launched_cmd(
    out: Path = typer.Argument(..., help="The run folder, holding its launch's plan.", show_default=False),
    dry_run: bool = DRY_RUN,
    verbose: bool = False,
) -> None:
    """One process of a launch (not for users: `srpo-dsl train` starts it): the plan its launcher wrote into
    the run folder, carried out as `train` would, with nothing parsed, compiled or planned again."""
    carry_out(launched_plan(out), dry_run, verbose)


def carry_out(plan: TrainPlan, dry_run: bool, verbose: bool) -> None:
    """The planned run: its dry run (who runs where), its processes (rollout workers and no launcher, or
    Ray), or training here; a Ctrl-C, SIGTERM or SIGHUP says where to `--resume` from (`stopping`: the
    command the user started; a launcher's processes are stopped by it)."""
    if dry_run and plan.setup.ray is not None:  # the actors' own dry run: who runs where, connected
        raise typer.Exit(launch(plan, verbose=verbose, dry_run=True))
    no_gpu_note(plan.device, asked=plan.setup.device)
    if dry_run:  # each process's role, node and device; loads no model
        if (table := launch_table(plan, verbose)) is not None:
            print(table)
        return
    try:
        with stopping_on_signals() if "RANK" not in os.environ else nullcontext():
            if plan.processes:  # rollout workers and no launcher, or Ray: the command launches them
                code = launch(plan, verbose=verbose)  # (rank 0 reports a Ctrl-C)
                if code - 128 in STOPPING and plan.setup.ray is None:  # a SIGTERM, SIGHUP passed on
                    raise Stopped(code - 128)  # (to its rank 0, which ends in silence: `rl.loop.trainer`)
                raise typer.Exit(code)
            training(plan.out, plan.opts.steps)  # for its watcher's line, should it end without a word
            run = train_plan(plan, verbose=verbose)
    except KeyboardInterrupt as exc:
        how, code = stopped_by(exc)
        raise interrupted(where_to_resume(plan.out, plan.resume, how), code) from None
    if int(os.environ.get("RANK", "0")) == 0:  # one report under a launcher
        report(run)


def no_gpu_note(device: str, asked: str | None) -> None:
    """GPUs asked for (`deepspeed --num_gpus 8` sets CUDA_VISIBLE_DEVICES) on a machine that has none: said
    at once by rank 0, as the CPU processes load for minutes before their first step."""
    gpus = asked is None and "CUDA_VISIBLE_DEVICES" in os.environ  # no --device: the machine's default
    if device != "cpu" or not gpus or os.environ.get("RANK", "0") != "0":
        return
    visible, ranks = os.environ["CUDA_VISIBLE_DEVICES"], os.environ.get("WORLD_SIZE", "1")
    note(
        f"no GPU found (CUDA_VISIBLE_DEVICES={visible}): {ranks} process(es) train on the CPU over gloo, "
        f"sharing its {os.cpu_count()} cores; loading takes minutes before the first step"
    )


def where_to_resume(out: Path, resumed: bool, how: str = "interrupted") -> str:
    """What a Ctrl-C (`how`: interrupted, stopped by SIGTERM) leaves: the last checkpoint and the flag that
    continues from it, or that nothing was kept (a fresh run stopped before its first checkpoint writes
    nothing)."""
    checkpoints = Run(out, []).checkpoints
    if not checkpoints:
        return f"{how} before the first checkpoint: nothing was kept in {out}; run the command again"
    again = "run the same command again" if resumed else "run the same command with --resume"
    return f"{how}: the last checkpoint is {checkpoints[-1]}; {again} to continue from it"


def parse_options(values: list[str]) -> dict[str, str]:
    """`--option NAME=VALUE` pairs, each NAME one of `TrainOptions` (the trainer checks the values)."""
    from srpo_dsl.api.training import checked_options

    out = {}
    for v in values:
        name, sep, value = (part.strip() for part in v.partition("="))
        if not sep or not name:
            raise CliError(f"--option {v}: expected NAME=VALUE, e.g. clip=0.1")
        try:
            checked_options({name: value})
        except UsageError as err:
            raise CliError(f"--option {v}: {err}") from None
        out[name] = value
    return out


def report(run: Run) -> None:
    """The last step, then the held-out result the run was for (from OUT/eval.jsonl)."""
    if run.history:
        last, out = run.history[-1], run.path
        print(f"step {last['step']}: return {last['return']:.3f}, grad norm {last['grad_norm']:.3f} -> {out}")
    else:
        print(f"nothing to do: {run.path} already reached its last step")
    if (curve := run.curve) is not None:
        print(heldout_summary(curve, run.path))


def heldout_summary(curve: EvalCurve, run: Path) -> str:
    """`held-out Avg@4 32.4% -> 67.0% (+34.6), Pass@4 ... at steps 0 -> 100; plots: srpo-dsl plot RUN`."""
    k = curve.k
    plots = f"plots: srpo-dsl plot {shlex.quote(str(run))}"
    if len(curve.steps) == 1:
        only = f"Avg@{k} {curve.avg[0]:.1f}%, Pass@{k} {curve.passed[0]:.1f}%"
        return f"held-out {only} at step {curve.steps[0]}; {plots}"
    avg = _change(f"Avg@{k}", curve.avg[0], curve.avg[-1])
    passed = _change(f"Pass@{k}", curve.passed[0], curve.passed[-1])
    return f"held-out {avg}, {passed} at steps {curve.steps[0]} -> {curve.steps[-1]}; {plots}"


def _change(name: str, first: float, last: float) -> str:
    """`Avg@4 32.4% -> 67.0% (+34.6)`: the difference of the rounded values, as shown."""
    first, last = round(first, 1), round(last, 1)
    return f"{name} {first:.1f}% -> {last:.1f}% ({last - first:+.1f})"


def plot_cmd(
    run: Path = typer.Argument(
        ..., help="A run folder written by `train` (holds metrics.jsonl).", show_default=False
    ),
    out: Path | None = typer.Option(None, "--out", help="Where to write the PNGs (default: RUN/plots)."),
    smoothing: float = typer.Option(
        SMOOTHING, "--ema", **BOUNDS["smoothing"].option(), help="EMA factor of the solid line."
    ),
) -> None:
    """Plot return, gradient norm, response length, active-set size, per-role panels, held-out Avg@k / Pass@k.

    Raw values faint, their EMA solid; the per-role panels (runs that logged `role/...`
    metrics) have one line per role; the held-out panel (from eval.jsonl, when the run
    evaluated) shows Avg@k and Pass@k at each evaluated step. One PNG per panel plus
    `training_dynamics.png` with all of them.

    Example:

      srpo-dsl plot runs/q1
    """
    dynamics = Run.open(run).dynamics
    written = write_plots(dynamics, out or run / PLOTS, smoothing)
    print(f"{len(dynamics.steps)} steps -> " + ", ".join(str(p) for p in written))


def export_cmd(
    run: Path = typer.Argument(
        ..., help="A run folder written by `train` (holds checkpoints/).", show_default=False
    ),
    step: int | None = typer.Option(
        None, "--step", **BOUNDS["step"].option(), help="The step to export (default: the latest)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Where to write (default: RUN/export)."),
    overwrite: bool = OVERWRITE,
    verbose: bool = False,
) -> None:
    """Export a checkpoint's trained policies as Hugging Face models, one folder per policy.

    A LoRA policy (an `adapter(...)` on a shared base, or its own `lora(...)`) gets
    OUT/POLICY/adapter (load with peft's `PeftModel.from_pretrained(base, path)`) and
    OUT/POLICY/merged (the adapter merged into its base); a fully fine-tuned policy gets
    OUT/POLICY/merged. Each `merged` loads with `AutoModelForCausalLM.from_pretrained` and holds
    the tokenizer; weights are fp32. Every policy folder is written, or none; a folder OUT that
    holds files is refused unless --overwrite (its policy folders are then replaced).

    Examples:

      srpo-dsl export runs/q1

      srpo-dsl export runs/q1 --step 100 --out models/q1-step100
    """
    target = out or run / "export"
    with libraries_quiet(not verbose):
        done = export_checkpoint(run, step, target, overwrite)
    print(f"step {done.step} of {run} -> {target}: {', '.join(done.written)}")
