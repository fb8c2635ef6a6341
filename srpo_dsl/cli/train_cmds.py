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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from srpo_dsl.api.dry_run import launch_table
from srpo_dsl.api.launch import relaunch
from srpo_dsl.api.quiet import libraries_quiet
from srpo_dsl.api.runs import PANELS, ROLE_PANELS, Run, export_checkpoint
from srpo_dsl.api.training import train_plan
from srpo_dsl.choices import OFFLOAD
from srpo_dsl.cli.common import DECODE, OVERWRITE, SET, VERBOSE, CliError, Decode, Device, choices
from srpo_dsl.cli.run_cmds import load_checked, models_of
from srpo_dsl.errors import UsageError
from srpo_dsl.registries import OBJECTIVES, ROLLOUT_ENGINES, SET_NORMS

if TYPE_CHECKING:
    from srpo_dsl.api.runs import Dynamics, EvalCurve, RoleSeries

Objective = choices("Objective", OBJECTIVES)
SetNorm = choices("SetNorm", SET_NORMS)
Offload = choices("Offload", OFFLOAD)
RolloutEngine = choices("RolloutEngine", ROLLOUT_ENGINES)

EVAL_PANEL = "heldout"  # eval.jsonl -> heldout.png: Avg@k and Pass@k over steps (the others: runlog.PANELS)

WORKFLOW = typer.Argument(..., help="A workflow file (*.srpo).", show_default=False)
OUT = typer.Option(Path("runs/train"), "--out", help="Run folder (metrics, eval, tb, checkpoints).")
STEPS = typer.Option(None, "--steps", min=1, help="Training steps (rollout batches).")
OBJECTIVE = typer.Option(
    None,
    "--objective",
    help='The policy loss (SRPO or a baseline); a Python one: --option objective="f.py:fn".',
)
SET_NORM = typer.Option(None, "--set-norm", help="SRPO's set reduction c(K): K^-1/2, 1/K or 1.")
LR = typer.Option(None, "--lr", min=0.0, help="Learning rate.")
GROUP = typer.Option(None, "--group", "-G", min=1, help="Rollouts per prompt (G).")
BATCH = typer.Option(None, "--batch", min=1, help="Prompts per step.")
ZERO = typer.Option(None, "--zero", min=0, max=3, help="DeepSpeed ZeRO stage (0-3).")
MICRO = typer.Option(None, "--micro-batches", min=1, help="Event-atomic micro-batches per optimizer step.")
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
    [], "--eval-data", help="Held-out data file in place of the task's eval split; repeat for several."
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
    setting: list[str] = SET,
    verbose: bool = VERBOSE,
) -> None:
    """Train a workflow's trainable policies with SRPO (or a baseline); flags override its `train` block.

    Writes OUT/metrics.jsonl, eval.jsonl, config.json, tb/ (TensorBoard) and checkpoints/step-N, and ends with
    the held-out Avg@k / Pass@k of the first and last evaluation. `--resume` continues it; torchrun: many.

    Examples:

      srpo-dsl train workflows/quickstart.srpo --out runs/q1

      srpo-dsl train workflows/search_k5_sqrt.srpo --objective srpo --set-norm mean --zero 2 --micro-batches 4

      srpo-dsl train workflows/quickstart.srpo --option clip=0.1 --option eval_every=10 --out runs/q3

      torchrun --nproc_per_node 2 -m srpo_dsl train workflows/quickstart.srpo --zero 3 --out runs/q2
    """
    flags = {"steps": steps, "lr": lr, "group": group, "batch": batch, "zero": zero, "seed": seed}
    flags |= {"micro_batches": micro_batches, "objective": objective, "set_norm": set_norm}
    overrides = parse_options(option) | {k: getattr(v, "value", v) for k, v in flags.items() if v is not None}
    wf = load_checked(workflow, setting)
    setup = {"eval_data": eval_data, "ds_config": ds_config, "device": device and device.value}
    setup |= {"offload": offload.value, "backend": backend.value, "decode": decode.value}
    plan = wf.plan(out, resume=resume, models=models_of(model, wf), verbose=verbose, **setup, **overrides)
    if dry_run:  # each process's role, node and device; loads no model
        if (table := launch_table(plan, verbose)) is not None:
            print(table)
        return
    if plan.processes:  # rollout workers and no launcher: the command launches them with itself
        raise typer.Exit(relaunch(plan.processes, plan.argv(verbose)))
    run = train_plan(plan, verbose=verbose)
    if int(os.environ.get("RANK", "0")) == 0:  # one report under a launcher
        report(run)


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


def ema(values: list[float], alpha: float) -> list[float]:
    """s_t = alpha s_{t-1} + (1 - alpha) x_t, started at x_0."""
    out, s = [], values[0] if values else 0.0
    for x in values:
        s = alpha * s + (1 - alpha) * x
        out.append(s)
    return out


def draw_metric(ax: Any, dynamics: Dynamics, key: str, smoothing: float) -> None:
    """Raw values faint, their EMA solid; the gradient-norm panel names its coefficient of variation."""
    from matplotlib.ticker import MaxNLocator

    values = dynamics.series[key]
    line = ax.plot(dynamics.steps, values, alpha=0.25, linewidth=1)[0]
    ax.plot(dynamics.steps, ema(values, smoothing), color=line.get_color(), linewidth=2)
    mean = sum(values) / len(values)
    cv = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 / mean if mean > 0 else 0.0
    ax.set_title(PANELS[key] + (f" (CV {cv:.2f})" if key == "grad_norm" else ""))
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def draw_roles(ax: Any, series: list[RoleSeries], metric: str, smoothing: float) -> None:
    """One colour per role: raw values faint, their EMA solid, named in the legend."""
    from matplotlib.ticker import MaxNLocator

    for s in series:
        line = ax.plot(s.steps, s.values, alpha=0.25, linewidth=1)[0]
        ax.plot(s.steps, ema(s.values, smoothing), color=line.get_color(), linewidth=2, label=s.role)
    ax.set_title(ROLE_PANELS[metric])
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="best")
    ax.grid(alpha=0.3)


def draw_heldout(ax: Any, curve: EvalCurve) -> None:
    """Held-out Avg@k and Pass@k (percent) at each evaluated step."""
    from matplotlib.ticker import MaxNLocator

    ax.plot(curve.steps, curve.avg, marker="o", linewidth=2, label=f"Avg@{curve.k}")
    ax.plot(curve.steps, curve.passed, marker="s", linewidth=2, label=f"Pass@{curve.k}")
    ax.set_title(f"Held-out Avg@{curve.k} / Pass@{curve.k} (%)")
    ax.set_xlabel("step")
    ax.set_ylim(0, 100)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)


def plot_cmd(
    run: Path = typer.Argument(
        ..., help="A run folder written by `train` (holds metrics.jsonl).", show_default=False
    ),
    out: Path | None = typer.Option(None, "--out", help="Where to write the PNGs (default: RUN/plots)."),
    smoothing: float = typer.Option(0.9, "--ema", min=0.0, max=0.999, help="EMA factor of the solid line."),
) -> None:
    """Plot return, gradient norm, response length, active-set size, per-role panels, held-out Avg@k / Pass@k.

    Raw values faint, their EMA solid; the per-role panels (runs that logged `role/...`
    metrics) have one line per role; the held-out panel (from eval.jsonl, when the run
    evaluated) shows Avg@k and Pass@k at each evaluated step. One PNG per panel plus
    `training_dynamics.png` with all of them.

    Example:

      srpo-dsl plot runs/q1
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dynamics = Run.open(run).dynamics
    folder = out or run / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    roles = [f"role_{metric}" for metric in dynamics.roles]
    names = [*dynamics.series, *roles, *([EVAL_PANEL] if dynamics.curve is not None else [])]
    written = []
    for name in names:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        draw_panel(ax, dynamics, name, smoothing)
        written.append(save(fig, folder / f"{name}.png"))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.5))
    for ax, name in zip(axes, names):
        draw_panel(ax, dynamics, name, smoothing)
    written.append(save(fig, folder / "training_dynamics.png"))
    print(f"{len(dynamics.steps)} steps -> " + ", ".join(str(p) for p in written))


def draw_panel(ax: Any, dynamics: Dynamics, name: str, smoothing: float) -> None:
    if name == EVAL_PANEL and dynamics.curve is not None:
        draw_heldout(ax, dynamics.curve)
    elif name.startswith("role_"):
        metric = name.removeprefix("role_")
        draw_roles(ax, dynamics.roles[metric], metric, smoothing)
    else:
        draw_metric(ax, dynamics, name, smoothing)


def save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def export_cmd(
    run: Path = typer.Argument(
        ..., help="A run folder written by `train` (holds checkpoints/).", show_default=False
    ),
    step: int | None = typer.Option(None, "--step", min=0, help="The step to export (default: the latest)."),
    out: Path | None = typer.Option(None, "--out", help="Where to write (default: RUN/export)."),
    overwrite: bool = OVERWRITE,
    verbose: bool = VERBOSE,
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
