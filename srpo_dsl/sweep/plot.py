"""curves.png: each cell's held-out Avg@k and Pass@k over steps, mean over seeds with a ± std band."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from srpo_dsl.sweep.results import CellResult


def mean_band(cell: CellResult, which: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The steps every seed evaluated, the mean over seeds there, and the sample std (0 with one seed)."""
    steps = sorted(set.intersection(*(set(r.steps) for r in cell.runs)))
    values = np.array(
        [[dict(zip(r.steps, r.avg if which == "avg" else r.passed))[s] for s in steps] for r in cell.runs]
    )
    std = values.std(axis=0, ddof=1) if len(cell.runs) > 1 else np.zeros(len(steps))
    return steps, values.mean(axis=0), std


def plot_curves(cells: list[CellResult], k: int | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, which, title in zip(axes, ("avg", "pass"), (f"Avg@{k or 'k'}", f"Pass@{k or 'k'}")):
        for cell in cells:
            if not cell.runs:
                continue
            steps, mean, std = mean_band(cell, which)
            line = ax.plot(
                steps, mean, marker="o", markersize=3, linewidth=2, label=f"{cell.name} (n={len(cell.runs)})"
            )
            ax.fill_between(steps, mean - std, mean + std, color=line[0].get_color(), alpha=0.15)
        ax.set_title(f"Held-out {title} (%), mean ± std over seeds")
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    if any(cell.runs for cell in cells):
        axes[0].legend(loc="best", fontsize="small")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
