"""Every plotted band and axis stays in its metric's range (`rl.loop.ranges`), every step axis is ticked at
whole steps: a sweep's curves.png and dynamics.png, `plot`'s PNGs, and the sweep's bootstrap intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import srpo_dsl.rl.loop.plots as run_plots
import srpo_dsl.sweep.plot as sweep_plot
from srpo_dsl.rl.loop.ranges import difference_range, range_of
from srpo_dsl.runfolder import PANELS, PERCENT, ROLE_PANELS, Dynamics, EvalCurve, RoleSeries
from srpo_dsl.sweep.dynamics import SERIES, RunDynamics
from srpo_dsl.sweep.results import PAIRED, CellResult, RunResult, compare
from srpo_dsl.sweep.stats import Difference

STEPS = [0, 1, 2]  # few steps: matplotlib's own ticks would fall at 0.25, 0.5, ...


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the plotters would save, kept open (drawn) instead of written."""
    figures: list = []

    def keep(fig, path: Path) -> Path:
        fig.canvas.draw()
        figures.append(fig)
        return path

    monkeypatch.setattr(sweep_plot, "save", keep)
    monkeypatch.setattr(run_plots, "save", keep)
    yield figures
    import matplotlib.pyplot as plt

    plt.close("all")


def assert_whole_steps(ax) -> None:
    labels = [t.get_text().replace("\N{MINUS SIGN}", "-") for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(float(x).is_integer() for x in labels), labels


def assert_in(values, bounds: tuple[float, float]) -> None:
    values = np.asarray(values, dtype=float)
    assert values.min() >= bounds[0] and values.max() <= bounds[1], (values, bounds)


def run(seed: int, passed: list[float]) -> RunResult:
    return RunResult(seed, 4, STEPS, [50.0] * len(STEPS), passed, {}, {})


def test_every_metric_drawn_or_reported_has_its_range_in_the_one_table() -> None:
    for name in [*PANELS, *ROLE_PANELS, *SERIES, *PAIRED.values(), "clip_fraction"]:
        low, high = range_of(name)
        assert low < high
    assert range_of("role/solver/clip_fraction") == (0.0, 1.0)
    assert range_of("pass_at_k", PERCENT) == (0.0, 100.0)
    with pytest.raises(KeyError):
        range_of("not_a_metric")


def test_a_pass_band_past_100_percent_is_clipped_and_steps_are_whole(drawn: list) -> None:
    """Pass@4 of [1.0, 0.5, 1.0] over three seeds: mean + std is 112%."""
    cell = CellResult(
        "c", "w.srpo", {}, [run(s, [p] * 3) for s, p in enumerate((100.0, 50.0, 100.0))], {}, {}, {}
    )
    sweep_plot.plot_curves([cell], 4, Path("curves.png"))
    (fig,) = drawn
    for ax in fig.axes:
        (collection,) = ax.collections
        vertices = np.concatenate([p.vertices for p in collection.get_paths()])
        assert_in(vertices[:, 1], (0.0, 100.0))
        assert_in(ax.get_ylim(), (0.0, 100.0))
        assert_whole_steps(ax)
    band = fig.axes[1].collections[0].get_paths()[0].vertices[:, 1]
    assert band.max() == pytest.approx(100.0)  # clipped, not dropped


def dynamics_run(seed: int) -> RunDynamics:
    series = {name: np.array([0.0, 1.0, 2.0]) for name in SERIES}
    series["clip/solver"] = np.array([0.0, 1.0, 1.0])
    return RunDynamics(seed, STEPS, series)


def test_the_sweeps_dynamics_stay_in_range_on_whole_steps(drawn: list) -> None:
    sweep_plot.plot_dynamics({"c": [dynamics_run(0), dynamics_run(1)]}, Path("dynamics.png"))
    (fig,) = drawn
    for ax, metric in zip(fig.axes, [*SERIES, "clip_fraction"]):
        assert_in(ax.get_ylim(), range_of(metric))
        assert_whole_steps(ax)


def test_plots_panels_stay_in_range_on_whole_steps(drawn: list, tmp_path: Path) -> None:
    series = {key: [0.0, 1.0, 0.5] for key in PANELS}
    roles = {m: [RoleSeries("solver", STEPS, [0.0, 1.0, 1.0])] for m in ROLE_PANELS}
    curve = EvalCurve(4, STEPS, [0.0, 50.0, 100.0], [0.0, 100.0, 100.0])
    run_plots.write_plots(Dynamics(STEPS, series, curve, roles), tmp_path)
    names = [*PANELS, *(f"role_{m}" for m in ROLE_PANELS), run_plots.EVAL_PANEL]
    for fig, name in zip(drawn, names):
        (ax,) = fig.axes
        metric = "avg_at_k" if name == run_plots.EVAL_PANEL else name.removeprefix("role_")
        assert_in(ax.get_ylim(), range_of(metric, PERCENT if name == run_plots.EVAL_PANEL else 1.0))
        assert_whole_steps(ax)
    for ax in drawn[-1].axes:  # training_dynamics.png
        assert_whole_steps(ax)


def outcomes(seed: int, correct: list[int]) -> RunResult:
    ids = [f"p{i}" for i in range(len(correct))]
    return RunResult(seed, 4, STEPS, [], [], {}, {"d": {"ids": ids, "correct": correct}})


def test_a_bootstrap_interval_of_a_bounded_metric_stays_in_its_range() -> None:
    """Pass@4 against a baseline that solved nothing: differences at the edge of [-100, 100] points."""
    base = [outcomes(s, [0] * 6) for s in range(3)]
    cell = [outcomes(s, c) for s, c in enumerate(([4] * 6, [4] * 5 + [0], [1] * 6))]
    for which in PAIRED.values():
        d = compare(cell, base, which)
        assert isinstance(d, Difference)
        assert_in([d.low, d.mean, d.high], difference_range(range_of(which, PERCENT)))
