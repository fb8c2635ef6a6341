"""`srpo-dsl plot`'s PNGs of a run's training dynamics (`runfolder.read_dynamics`): one per panel of
`figures.panels` (the same figures `srpo-dsl view` inlines as SVG) and `training_dynamics.png` with all of
them; also drawn at the end of a run whose trackers keep files."""

from __future__ import annotations

import shutil
from contextlib import suppress
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from srpo_dsl.arguments import checked
from srpo_dsl.errors import WriteError
from srpo_dsl.io import FOLDER, check_output_file, kind_of, outermost_missing, writing
from srpo_dsl.rl.loop.figures import EVAL_PANEL, SMOOTHING, figure, panels
from srpo_dsl.runfolder import PLOTS, Dynamics, read_dynamics

if TYPE_CHECKING:  # matplotlib loads when a figure is drawn
    from matplotlib.figure import Figure

__all__ = ["EVAL_PANEL", "SMOOTHING", "pyplot", "run_plots", "save", "write_plots"]


def pyplot() -> ModuleType:
    """matplotlib.pyplot drawing to files only (the Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@checked
def write_plots(dynamics: Dynamics, folder: Path, smoothing: float = SMOOTHING) -> list[Path]:
    """Every panel's PNG in `folder` (made if missing), then all of them in training_dynamics.png. When one
    cannot be written (a full disk), the folders made here are removed: no empty or partial `plots/`."""
    kind = kind_of(folder)
    if kind not in (None, FOLDER):  # a file, a device, a FIFO: refused before any is drawn
        raise WriteError(folder, f"it is {kind}, not a folder")
    made = outermost_missing(folder)
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
    try:
        shown = panels(dynamics)
        written = [save(figure([panel], smoothing), folder / f"{panel.name}.png") for panel in shown]
        written.append(save(figure(shown, smoothing), folder / "training_dynamics.png"))
    except BaseException:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise
    return written


def run_plots(run: Path) -> list[Path]:
    """A run folder's PNGs in RUN/plots, as its trackers that keep files get them at the end of the run."""
    return write_plots(read_dynamics(run), run / PLOTS)


def save(fig: Figure, path: Path) -> Path:
    """Write `fig` to `path` atomically and close it; a disk that refuses it (read-only, full) is one
    `WriteError` naming `path`, and no partial file stays."""
    plt = pyplot()
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    try:
        check_output_file(path)  # only a regular file is replaced
        with writing(path):
            fig.savefig(tmp, dpi=120)
            tmp.replace(path)
    finally:
        plt.close(fig)
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
    return path
