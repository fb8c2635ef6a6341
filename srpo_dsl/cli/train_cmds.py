"""`srpo-dsl train` and `srpo-dsl plot`: train a workflow's policies, draw its training dynamics.

Choices come from their one source (`srpo_dsl.rl.names`), never restated here. Unless
`--verbose`, what the libraries report while training (progress bars, INFO and WARNING
logs, Python warnings, lines printed on stdout such as DeepSpeed's op builds) is hidden;
srpo-dsl's own progress bar (stderr) stays, and the run ends with the held-out result.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from srpo_dsl.cli.common import DECODE, EXIT_INPUT, CliError, Decode, Device, choices
from srpo_dsl.rl.names import OBJECTIVES, OFFLOAD, ROLLOUT_ENGINES, SET_NORMS
from srpo_dsl.rl.runlog import current_keys

Objective = choices("Objective", OBJECTIVES)
SetNorm = choices("SetNorm", SET_NORMS)
Offload = choices("Offload", OFFLOAD)
RolloutEngine = choices("RolloutEngine", ROLLOUT_ENGINES)

PANELS = {  # metrics.jsonl key -> panel title (the paper's training-dynamics figure)
    "return": "Return (mean; task score + invalid penalty)",
    "grad_norm": "Gradient norm",
    "response_length": "Response length (tokens)",
    "mean_set_size": "Mean active-set size",
}
EVAL_PANEL = "heldout"  # eval.jsonl -> heldout.png: Avg@k and Pass@k over steps
ROLE_PANELS = {  # metrics.jsonl `role/ROLE/<metric>` -> panel `role_<metric>`, one line per role
    "invalid_rate": "Invalid-output rate per role",
    "response_length": "Response length per role (tokens)",
}

QUIET_ENV = {  # read by the libraries when they are imported
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights", "Writing model shards"
}
LIBRARIES = (
    r"(torch|transformers|deepspeed|accelerate|huggingface_hub|peft|safetensors|tokenizers|srpo_dsl)(\.|$)"
)

OUT_OF_MEMORY = (
    "out of GPU memory: use a higher --zero stage, --offload optimizer (or all with --zero 3), "
    "more --micro-batches, a smaller --batch or --group, shorter max_tokens, or --decode dynamic"
)

WORKFLOW = typer.Argument(..., help="A workflow file (*.srpo).", show_default=False)
OUT = typer.Option(Path("runs/train"), "--out", help="Run folder (metrics, eval, tb, checkpoints).")
STEPS = typer.Option(None, "--steps", min=1, help="Training steps (rollout batches).")
OBJECTIVE = typer.Option(None, "--objective", help="The policy loss (SRPO or a baseline).")
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
VERBOSE = typer.Option(False, "--verbose", "-v", help="Show the libraries' logs, warnings and progress bars.")
LOCAL_RANK = typer.Option(
    -1, "--local_rank", "--local-rank", hidden=True, help="Set by `deepspeed`; LOCAL_RANK is what is used."
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
    verbose: bool = VERBOSE,
    local_rank: int = LOCAL_RANK,
) -> None:
    """Train a workflow's trainable policies with SRPO (or a baseline); flags override its `train` block.

    Writes OUT/metrics.jsonl, OUT/eval.jsonl, OUT/tb (TensorBoard), OUT/config.json and
    OUT/checkpoints/step-N, and ends with the held-out Avg@k / Pass@k at the first and last
    evaluation. Several processes: launch with `torchrun` or `deepspeed`.

    Examples:

      srpo-dsl train workflows/quickstart.srpo --out runs/q1

      srpo-dsl train workflows/quickstart.srpo --out runs/q1 --resume

      srpo-dsl train workflows/search_k5_sqrt.srpo --objective srpo --set-norm mean --zero 2 --micro-batches 4

      srpo-dsl train workflows/quickstart.srpo --option clip=0.1 --option eval_every=10 --out runs/q3

      torchrun --nproc_per_node 2 -m srpo_dsl train workflows/quickstart.srpo --zero 3 --out runs/q2
    """
    for path in (workflow, ds_config, *eval_data):
        if path is not None and not path.is_file():
            raise CliError(f"cannot read {path}: no such file")
    flags = {"steps": steps, "lr": lr, "group": group, "batch": batch, "zero": zero, "seed": seed}
    flags |= {"micro_batches": micro_batches, "objective": objective, "set_norm": set_norm}
    overrides = parse_options(option) | {k: getattr(v, "value", v) for k, v in flags.items() if v is not None}
    options = {"eval_data": eval_data, "ds_config": ds_config, "device": device and device.value}
    options |= {"offload": offload.value, "backend": backend.value, "decode": decode.value}
    with libraries_quiet(not verbose):
        history = run_training(workflow, out, overrides, resume, model, options)
    if int(os.environ.get("RANK", "0")) == 0:  # one report under a launcher
        report(history, out)


def parse_options(values: list[str]) -> dict[str, str]:
    """`--option NAME=VALUE` pairs (the trainer checks the names and types against `TrainOptions`)."""
    out = {}
    for v in values:
        name, sep, value = v.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--option {v}: expected NAME=VALUE, e.g. clip=0.1")
        out[name.strip()] = value.strip()
    return out


def run_training(
    workflow: Path,
    out: Path,
    overrides: dict[str, Any],
    resume: bool,
    model: list[str],
    options: dict[str, Any],
) -> list[dict[str, float]]:
    """`rl.trainer.train`, with every failure the user can fix as one line."""
    import torch

    from srpo_dsl.backends.base import BackendError
    from srpo_dsl.lang.errors import SrpoError
    from srpo_dsl.rl.trainer import TrainError, train
    from srpo_dsl.runtime.setup import load_workflow, parse_model_overrides

    try:
        models = parse_model_overrides(model, list(load_workflow(workflow).graph.policies))
        return train(workflow, out, overrides, resume, models=models, **options)
    except SrpoError as err:
        first = err.diagnostics[0]
        raise CliError(
            f"{first.span}: error[{first.code}]: {first.message} "
            f"(run `srpo-dsl validate {workflow}` for all diagnostics)",
            EXIT_INPUT,
        ) from None
    except (TrainError, BackendError, ValueError, OSError) as exc:
        raise CliError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    except torch.cuda.OutOfMemoryError:
        raise CliError(OUT_OF_MEMORY, EXIT_INPUT) from None


@contextmanager
def libraries_quiet(enabled: bool) -> Iterator[None]:
    """Hide the libraries' progress bars, INFO/WARNING logs, warnings and stdout for the block.

    stdout is silenced at the file-descriptor level too, so lines that compiled extensions
    print (DeepSpeed's CPU Adam) are hidden as well; srpo-dsl reports on stderr meanwhile.
    """
    if not enabled:
        yield
        return
    unset = [key for key in QUIET_ENV if key not in os.environ]  # a value the user set wins
    os.environ.update({key: QUIET_ENV[key] for key in unset})
    previous_disable = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), stdout_silenced():
            warnings.filterwarnings("ignore", module=LIBRARIES)
            yield
    finally:
        logging.disable(previous_disable)
        for key in unset:
            del os.environ[key]


@contextmanager
def stdout_silenced() -> Iterator[None]:
    """sys.stdout and file descriptor 1 go to the null device for the block (C buffers flushed first)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null, redirect_stdout(null):
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            _flush_c_stdio()
            os.dup2(saved, 1)
            os.close(saved)


def _flush_c_stdio() -> None:
    """fflush(NULL): what C code buffered while stdout was silenced is dropped now, not printed later."""
    import ctypes

    with suppress(OSError, AttributeError):  # no C library to reach (not Linux or macOS)
        ctypes.CDLL(None).fflush(None)


def report(history: list[dict[str, float]], out: Path) -> None:
    """The last step, then the held-out result the run was for (from OUT/eval.jsonl)."""
    if history:
        last = history[-1]
        print(
            f"step {last['step']}: return {last['return']:.3f}, loss {last['loss']:.4f}, "
            f"grad norm {last['grad_norm']:.3f} -> {out}"
        )
    else:
        print(f"nothing to do: {out} already reached its last step")
    evals = read_jsonl(out / "eval.jsonl") if (out / "eval.jsonl").is_file() else []
    if evals:
        print(heldout_summary(eval_curve(evals, out / "eval.jsonl"), out))


@dataclass(frozen=True)
class EvalCurve:
    """Held-out Avg@k and Pass@k (percent) at each evaluated step, from eval.jsonl."""

    k: int
    steps: list[int]
    avg: list[float]
    passed: list[float]


def eval_curve(rows: list[dict[str, Any]], path: Path) -> EvalCurve:
    """The curve of eval.jsonl's rows; CliError when a row lacks its fields."""
    try:
        return EvalCurve(
            int(rows[-1]["k"]),
            [int(r["step"]) for r in rows],
            [100 * float(r["avg_at_k"]) for r in rows],
            [100 * float(r["pass_at_k"]) for r in rows],
        )
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        raise CliError(f"{path}: not an eval file ({type(exc).__name__}: {exc})", EXIT_INPUT) from None


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


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON Lines file; CliError (one line) when it is missing or not JSON."""
    if not path.is_file():
        raise CliError(f"cannot read {path}: no such file (is {path.parent} a training run?)")
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: not JSON Lines ({exc})", EXIT_INPUT) from None


def ema(values: list[float], alpha: float) -> list[float]:
    """s_t = alpha s_{t-1} + (1 - alpha) x_t, started at x_0."""
    out, s = [], values[0] if values else 0.0
    for x in values:
        s = alpha * s + (1 - alpha) * x
        out.append(s)
    return out


@dataclass(frozen=True)
class RoleSeries:
    """One role's values of one metric at the steps that have it (a role no episode reached has none)."""

    role: str
    steps: list[int]
    values: list[float]


@dataclass(frozen=True)
class Dynamics:
    """What `plot` draws: the per-step metrics, the per-role ones (when logged), the held-out curve."""

    steps: list[int]
    series: dict[str, list[float]]
    curve: EvalCurve | None
    roles: dict[str, list[RoleSeries]]  # metric of ROLE_PANELS -> one series per role; {} for older runs


def read_dynamics(run: Path) -> Dynamics:
    """The run's metrics, an older run's under the keys of today (`current_keys`)."""
    path = run / "metrics.jsonl"
    rows = [current_keys(row) for row in read_jsonl(path)]
    if not rows:
        raise CliError(f"{path}: no steps recorded yet", EXIT_INPUT)
    try:
        steps = [int(r["step"]) for r in rows]
        series = {key: [float(r[key]) for r in rows] for key in PANELS}
        roles = {metric: role_series(rows, metric) for metric in ROLE_PANELS}
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(f"{path}: not a metrics file ({type(exc).__name__}: {exc})", EXIT_INPUT) from None
    evals = read_jsonl(run / "eval.jsonl") if (run / "eval.jsonl").is_file() else []
    curve = eval_curve(evals, run / "eval.jsonl") if evals else None
    return Dynamics(steps, series, curve, {m: s for m, s in roles.items() if s})


def role_series(rows: list[dict[str, Any]], metric: str) -> list[RoleSeries]:
    """Each role's `role/ROLE/metric` over the steps that logged it, roles in order of appearance."""
    names = [k.split("/")[1] for r in rows for k in r if k.startswith("role/") and k.endswith(f"/{metric}")]
    out = []
    for role in dict.fromkeys(names):
        key = f"role/{role}/{metric}"
        logged = [r for r in rows if key in r]
        out.append(RoleSeries(role, [int(r["step"]) for r in logged], [float(r[key]) for r in logged]))
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

    dynamics = read_dynamics(run)
    folder = out or run / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    roles = [f"role_{metric}" for metric in dynamics.roles]
    names = [*PANELS, *roles, *([EVAL_PANEL] if dynamics.curve is not None else [])]
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
    verbose: bool = VERBOSE,
) -> None:
    """Export a checkpoint's trained policies as Hugging Face models, one folder per policy.

    A LoRA policy (an `adapter(...)` on a shared base, or its own `lora(...)`) gets
    OUT/POLICY/adapter (load with peft's `PeftModel.from_pretrained(base, path)`) and
    OUT/POLICY/merged (the adapter merged into its base); a fully fine-tuned policy gets
    OUT/POLICY/merged. Each `merged` loads with `AutoModelForCausalLM.from_pretrained` and holds
    the tokenizer; weights are fp32. Every policy folder is written, or none.

    Examples:

      srpo-dsl export runs/q1

      srpo-dsl export runs/q1 --step 100 --out models/q1-step100
    """
    from contextlib import ExitStack

    from srpo_dsl.cli.run_cmds import staged_output

    target = out or run / "export"
    created = not target.exists()
    with libraries_quiet(not verbose):
        from srpo_dsl.rl.export import ExportError, export_engine, plan_export  # quiet: imports transformers

        try:
            with ExitStack() as stack:  # every policy folder is renamed into place at the end, or none
                plan = plan_export(run, step)
                folders = {p: stack.enter_context(staged_output(target / p)) for p in plan.policies}
                for engine in plan.engines:
                    export_engine(engine, plan.zero, folders)
        except (ExportError, OSError) as exc:
            if created and target.is_dir() and not any(target.iterdir()):
                target.rmdir()
            raise CliError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    kinds = {e.owner: "adapter, merged" if e.adapters is not None else "merged" for e in plan.engines}
    written = [f"{p} ({kinds[e.owner]})" for e in plan.engines for p in e.policies]
    print(f"step {plan.step} of {run} -> {target}: {', '.join(written)}")
