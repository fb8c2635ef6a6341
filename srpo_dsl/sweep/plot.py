"""curves.png: each cell's held-out Avg@k and Pass@k over steps, mean over seeds with a ± std band
(clipped to 0-100%); dynamics.png: each cell's training dynamics per step (sweep/dynamics.py), mean over
seeds. Every axis stays in its metric's range (`ranges.RANGES`); steps are ticked whole."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from srpo_dsl.rl.loop.figures import keep_in_range, step_axis
from srpo_dsl.rl.loop.plots import pyplot, save
from srpo_dsl.rl.loop.ranges import band, range_of
from srpo_dsl.runfolder import PERCENT
from srpo_dsl.sweep.dynamics import CLIP, SERIES, WINDOW, RunDynamics, mean_series
from srpo_dsl.sweep.results import CellResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TITLES = {
    "return": "return",
    "grad_norm": "gradient norm",
    "grad_norm_cv": f"gradient-norm CV (last {WINDOW} steps)",
    "response_length": "tokens per call",
    "mean_set_size": "members per event (mean K)",
}
SMOOTH = 5  # steps: the moving average drawn for the noisy per-step series


CURVES = {"avg": "avg_at_k", "pass": "pass_at_k"}  # curves.png's panels: a run's curve -> its metric


def mean_band(cell: CellResult, which: str) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """The steps every seed evaluated, the mean over seeds there, and the band mean ± the sample std
    (0 with one seed) clipped to the metric's range in percent (`ranges.RANGES`)."""
    steps = sorted(set.intersection(*(set(r.steps) for r in cell.runs)))
    values = np.array(
        [[dict(zip(r.steps, r.avg if which == "avg" else r.passed))[s] for s in steps] for r in cell.runs]
    )
    std = values.std(axis=0, ddof=1) if len(cell.runs) > 1 else np.zeros(len(steps))
    mean = values.mean(axis=0)
    return steps, mean, *band(mean, std, range_of(CURVES[which], PERCENT))


def draw_curves(axes: np.ndarray, cells: list[CellResult], k: int | None) -> None:
    """Avg@k on the first axes, Pass@k on the second: per cell its mean line and its band."""
    for ax, which in zip(axes, CURVES):
        for cell in cells:
            if not cell.runs:
                continue
            steps, mean, low, high = mean_band(cell, which)
            label = f"{cell.name} (n={len(cell.runs)})"
            line = ax.plot(steps, mean, marker="o", markersize=3, linewidth=2, label=label)
            ax.fill_between(steps, low, high, color=line[0].get_color(), alpha=0.15)
        title = f"{which.capitalize()}@{k or 'k'}"
        ax.set_title(f"Held-out {title} (%), mean ± std over seeds")
        step_axis(ax)
        keep_in_range(ax, range_of(CURVES[which], PERCENT))
        ax.grid(alpha=0.3)
    if any(cell.runs for cell in cells):
        axes[0].legend(loc="best", fontsize="small")


def plot_curves(cells: list[CellResult], k: int | None, path: Path) -> None:
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4))
    draw_curves(axes, cells, k)
    save(fig, path)


def smoothed(values: np.ndarray) -> np.ndarray:
    """The moving average over the last SMOOTH values at each step (fewer at the start)."""
    sums = np.cumsum(np.nan_to_num(values))
    counts = np.minimum(np.arange(1, len(values) + 1), SMOOTH)
    return (sums - np.concatenate([np.zeros(SMOOTH), sums[:-SMOOTH]])[: len(values)]) / counts


def draw_dynamics(fig: Figure, axes: np.ndarray, dynamics: dict[str, list[RunDynamics]]) -> None:
    """Six panels: the SERIES, and the clip fraction of each event type that clipped (a style per type)."""
    clipped = False
    for i, (name, runs) in enumerate((n, r) for n, r in dynamics.items() if r):
        color = f"C{i % 10}"
        for ax, series in zip(axes.flat, SERIES):
            steps, mean = mean_series(runs, series)
            ax.plot(steps, smoothed(mean), color=color, linewidth=1.5, label=f"{name} (n={len(runs)})")
        clips = sorted({k for r in runs for k in r.series if k.startswith(CLIP)})
        for style, key in zip(("-", "--", ":", "-.") * len(clips), clips):
            steps, mean = mean_series(runs, key)
            if np.nanmax(mean, initial=0.0) > 0:  # an event type nothing clipped would only crowd the legend
                clipped = True
                label = f"{name} {key[len(CLIP) :]}"
                axes.flat[5].plot(steps, smoothed(mean), color=color, linestyle=style, label=label)
    titles = [*(TITLES[s] for s in SERIES), "clip fraction per event type"]
    for ax, title, metric in zip(axes.flat, titles, [*SERIES, "clip_fraction"]):
        ax.set_title(title, fontsize="medium")
        step_axis(ax)
        keep_in_range(ax, range_of(metric))
        ax.grid(alpha=0.3)
    fig.suptitle(f"Training dynamics: mean over seeds, {SMOOTH}-step moving average", fontsize="medium")
    if any(dynamics.values()):
        axes.flat[0].legend(loc="best", fontsize="small")
    clip_axes = axes.flat[5]
    if clipped:
        clip_axes.legend(loc="best", fontsize="x-small")
    else:
        clip_axes.text(0.5, 0.5, "nothing clipped", ha="center", va="center", transform=clip_axes.transAxes)


def plot_dynamics(dynamics: dict[str, list[RunDynamics]], path: Path) -> None:
    fig, axes = pyplot().subplots(2, 3, figsize=(15, 7.5))
    draw_dynamics(fig, axes, dynamics)
    save(fig, path)
