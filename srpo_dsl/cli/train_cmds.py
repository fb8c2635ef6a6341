"""`srpo-dsl train` and `srpo-dsl plot`: train a workflow's policies, draw its training dynamics."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from srpo_dsl.cli.common import EXIT_INPUT, CliError

PANELS = {  # metrics.jsonl key -> panel title (the paper's training-dynamics figure)
    "score": "Score (mean reward)",
    "grad_norm": "Gradient norm",
    "response_length": "Response length (tokens)",
    "mean_set_size": "Mean active-set size",
}


class Objective(str, Enum):
    srpo = "srpo"
    grpo = "grpo"
    drmas = "drmas"
    seq = "seq"


class SetNorm(str, Enum):
    sqrt = "sqrt"
    mean = "mean"
    none = "none"


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class Offload(str, Enum):
    none = "none"
    optimizer = "optimizer"
    params = "params"
    all = "all"


def train_cmd(
    workflow: Path = typer.Argument(..., help="A workflow file (*.srpo).", show_default=False),
    out: Path = typer.Option(
        Path("runs/train"), "--out", help="Run folder (metrics, eval, tb, checkpoints)."
    ),
    steps: int | None = typer.Option(None, "--steps", min=1, help="Training steps (rollout batches)."),
    objective: Objective | None = typer.Option(None, "--objective", help="srpo | grpo | drmas | seq."),
    set_norm: SetNorm | None = typer.Option(
        None, "--set-norm", help="SRPO set reduction: sqrt | mean | none."
    ),
    lr: float | None = typer.Option(None, "--lr", min=0.0, help="Learning rate."),
    group: int | None = typer.Option(None, "--group", "-G", min=1, help="Rollouts per prompt (G)."),
    batch: int | None = typer.Option(None, "--batch", min=1, help="Prompts per step."),
    zero: int | None = typer.Option(None, "--zero", min=0, max=3, help="DeepSpeed ZeRO stage (0-3)."),
    micro_batches: int | None = typer.Option(
        None, "--micro-batches", min=1, help="Event-atomic micro-batches per optimizer step."
    ),
    ds_config: Path | None = typer.Option(None, "--ds-config", help="JSON merged over the DeepSpeed config."),
    offload: Offload = typer.Option(
        Offload.none, "--offload", help="ZeRO offload to CPU: none | optimizer | params | all."
    ),
    model: list[str] = typer.Option(
        [], "--model", help="Override a policy's model: PATH (all policies) or POLICY=PATH; repeatable."
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint in --out."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of data order and sampling."),
    device: Device | None = typer.Option(None, "--device", help="cpu | cuda (default: cuda when available)."),
    local_rank: int = typer.Option(
        -1,
        "--local_rank",
        "--local-rank",
        hidden=True,
        help="Set by the `deepspeed` launcher; LOCAL_RANK is what is used.",
    ),
) -> None:
    """Train a workflow's trainable policies with SRPO (or a baseline); flags override its `train` block.

    Writes OUT/metrics.jsonl, OUT/eval.jsonl, OUT/tb (TensorBoard), OUT/config.json and
    OUT/checkpoints/step-N. Several processes: launch with `torchrun` or `deepspeed`.

    Examples:

      srpo-dsl train workflows/quickstart.srpo --out runs/q1

      srpo-dsl train workflows/quickstart.srpo --out runs/q1 --resume

      srpo-dsl train workflows/search_k5_sqrt.srpo --objective srpo --set-norm mean --zero 2 --micro-batches 4

      torchrun --nproc_per_node 2 -m srpo_dsl train workflows/quickstart.srpo --zero 3 --out runs/q2
    """
    from srpo_dsl.backends.base import BackendError
    from srpo_dsl.lang.errors import SrpoError
    from srpo_dsl.rl.trainer import TrainError, train
    from srpo_dsl.runtime.setup import load_workflow, parse_model_overrides

    if not workflow.is_file():
        raise CliError(f"cannot read {workflow}: no such file")
    if ds_config is not None and not ds_config.is_file():
        raise CliError(f"cannot read {ds_config}: no such file")
    overrides = {
        "steps": steps,
        "objective": objective and objective.value,
        "set_norm": set_norm and set_norm.value,
        "lr": lr,
        "group": group,
        "batch": batch,
        "zero": zero,
        "micro_batches": micro_batches,
        "seed": seed,
    }
    try:
        policies = list(load_workflow(workflow).graph.graph["policies"])
        models = parse_model_overrides(model, policies)
        history = train(
            workflow,
            out,
            overrides,
            resume,
            models=models,
            ds_config=ds_config,
            offload=offload.value,
            device=device and device.value,
        )
    except SrpoError as err:
        first = err.diagnostics[0]
        raise CliError(
            f"{first.span}: error[{first.code}]: {first.message} "
            f"(run `srpo-dsl validate {workflow}` for all diagnostics)",
            EXIT_INPUT,
        ) from None
    except (TrainError, BackendError, ValueError, OSError) as exc:
        raise CliError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    if history:
        last = history[-1]
        print(
            f"step {last['step']}: score {last['score']:.3f}, loss {last['loss']:.4f}, "
            f"grad norm {last['grad_norm']:.3f} -> {out}"
        )
    else:
        print(f"nothing to do: {out} already reached its last step")


def ema(values: list[float], alpha: float) -> list[float]:
    """s_t = alpha s_{t-1} + (1 - alpha) x_t, started at x_0."""
    out, s = [], values[0] if values else 0.0
    for x in values:
        s = alpha * s + (1 - alpha) * x
        out.append(s)
    return out


def plot_cmd(
    run: Path = typer.Argument(
        ..., help="A run folder written by `train` (holds metrics.jsonl).", show_default=False
    ),
    out: Path | None = typer.Option(None, "--out", help="Where to write the PNGs (default: RUN/plots)."),
    smoothing: float = typer.Option(0.9, "--ema", min=0.0, max=0.999, help="EMA factor of the solid line."),
) -> None:
    """Plot score, gradient norm, response length and mean active-set size over steps.

    Raw values faint, their EMA solid. One PNG per panel plus `training_dynamics.png`.

    Example:

      srpo-dsl plot runs/q1
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    path = run / "metrics.jsonl"
    if not path.is_file():
        raise CliError(f"cannot read {path}: no such file (is {run} a training run?)")
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        steps = [int(r["step"]) for r in rows]
        series = {key: [float(r[key]) for r in rows] for key in PANELS}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CliError(f"{path}: not a metrics file ({type(exc).__name__}: {exc})", EXIT_INPUT) from None
    if not rows:
        raise CliError(f"{path}: no steps recorded yet", EXIT_INPUT)
    folder = out or run / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    norms = series["grad_norm"]
    mean = sum(norms) / len(norms)
    cv = (sum((n - mean) ** 2 for n in norms) / len(norms)) ** 0.5 / mean if mean > 0 else 0.0

    def draw(ax, key: str) -> None:
        line = ax.plot(steps, series[key], alpha=0.25, linewidth=1)[0]
        ax.plot(steps, ema(series[key], smoothing), color=line.get_color(), linewidth=2)
        ax.set_title(PANELS[key] + (f" (CV {cv:.2f})" if key == "grad_norm" else ""))
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)

    written = []
    for key in PANELS:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        draw(ax, key)
        fig.tight_layout()
        fig.savefig(folder / f"{key}.png", dpi=120)
        plt.close(fig)
        written.append(folder / f"{key}.png")
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.5))
    for ax, key in zip(axes, PANELS):
        draw(ax, key)
    fig.tight_layout()
    fig.savefig(folder / "training_dynamics.png", dpi=120)
    plt.close(fig)
    written.append(folder / "training_dynamics.png")
    print(f"{len(steps)} steps -> " + ", ".join(str(p) for p in written))
