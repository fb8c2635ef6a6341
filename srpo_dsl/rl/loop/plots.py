"""`srpo-dsl plot`'s PNGs of a run's training dynamics (`runlog.read_dynamics`): one per panel (`PANELS`,
the per-role `ROLE_PANELS` when logged, the held-out curve when evaluated) and `training_dynamics.png`
with all of them; also drawn at the end of a run whose trackers keep files."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import Any

from srpo_dsl.arguments import checked
from srpo_dsl.io import writing
from srpo_dsl.rl.loop.ranges import PERCENT, Range, range_of
from srpo_dsl.rl.loop.runlog import PANELS, ROLE_PANELS, Dynamics, EvalCurve, RoleSeries

EVAL_PANEL = "heldout"  # eval.jsonl -> heldout.png: Avg@k and Pass@k over steps (the others: runlog.PANELS)
SMOOTHING = 0.9  # the EMA factor of the solid lines


def pyplot() -> Any:
    """matplotlib.pyplot drawing to files only (the Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@checked
def write_plots(dynamics: Dynamics, folder: Path, smoothing: float = SMOOTHING) -> list[Path]:
    """Every panel's PNG in `folder` (made if missing), then all of them in training_dynamics.png."""
    plt = pyplot()
    with writing(folder):
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
    return written


def ema(values: list[float], alpha: float) -> list[float]:
    """s_t = alpha s_{t-1} + (1 - alpha) x_t, started at x_0."""
    out, s = [], values[0] if values else 0.0
    for x in values:
        s = alpha * s + (1 - alpha) * x
        out.append(s)
    return out


def step_axis(ax: Any) -> None:
    """An x axis of training steps: labelled, ticked at whole steps only."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def keep_in_range(ax: Any, bounds: Range) -> None:
    """The y axis, once everything is drawn, cut to the metric's range (`ranges.RANGES`): no margin
    below 0 for a norm, above 100% for Pass@k. Values outside it (a file not ours) keep the axis whole."""
    low, high = ax.get_ylim()
    low, high = max(low, bounds[0]), min(high, bounds[1])
    if low < high:
        ax.set_ylim(low, high)


def draw_metric(ax: Any, dynamics: Dynamics, key: str, smoothing: float) -> None:
    """Raw values faint, their EMA solid; the gradient-norm panel names its coefficient of variation."""
    values = dynamics.series[key]
    line = ax.plot(dynamics.steps, values, alpha=0.25, linewidth=1)[0]
    ax.plot(dynamics.steps, ema(values, smoothing), color=line.get_color(), linewidth=2)
    mean = sum(values) / len(values)
    cv = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 / mean if mean > 0 else 0.0
    ax.set_title(PANELS[key] + (f" (CV {cv:.2f})" if key == "grad_norm" else ""))
    step_axis(ax)
    keep_in_range(ax, range_of(key))
    ax.grid(alpha=0.3)


def draw_roles(ax: Any, series: list[RoleSeries], metric: str, smoothing: float) -> None:
    """One colour per role: raw values faint, their EMA solid, named in the legend."""
    for s in series:
        line = ax.plot(s.steps, s.values, alpha=0.25, linewidth=1)[0]
        ax.plot(s.steps, ema(s.values, smoothing), color=line.get_color(), linewidth=2, label=s.role)
    ax.set_title(ROLE_PANELS[metric])
    step_axis(ax)
    keep_in_range(ax, range_of(metric))
    ax.legend(loc="best")
    ax.grid(alpha=0.3)


def draw_heldout(ax: Any, curve: EvalCurve) -> None:
    """Held-out Avg@k and Pass@k (percent) at each evaluated step, on their whole range."""
    ax.plot(curve.steps, curve.avg, marker="o", linewidth=2, label=f"Avg@{curve.k}")
    ax.plot(curve.steps, curve.passed, marker="s", linewidth=2, label=f"Pass@{curve.k}")
    ax.set_title(f"Held-out Avg@{curve.k} / Pass@{curve.k} (%)")
    step_axis(ax)
    ax.set_ylim(*range_of("avg_at_k", PERCENT))
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)


def draw_panel(ax: Any, dynamics: Dynamics, name: str, smoothing: float) -> None:
    if name == EVAL_PANEL and dynamics.curve is not None:
        draw_heldout(ax, dynamics.curve)
    elif name.startswith("role_"):
        metric = name.removeprefix("role_")
        draw_roles(ax, dynamics.roles[metric], metric, smoothing)
    else:
        draw_metric(ax, dynamics, name, smoothing)


def save(fig: Any, path: Path) -> Path:
    """Write `fig` to `path` atomically and close it; a disk that refuses it (read-only, full) is one
    `WriteError` naming `path`, and no partial file stays."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    try:
        with writing(path):
            fig.savefig(tmp, dpi=120)
            tmp.replace(path)
    finally:
        plt.close(fig)
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
    return path
