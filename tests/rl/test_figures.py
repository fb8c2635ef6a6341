"""One source for a run's curves (`rl.loop.figures`): `srpo-dsl view`'s inline SVG chart of a metric and
`srpo-dsl plot`'s PNG of it are drawn by the same panel and figure functions, with the same data and the
same axes; a point that is not a finite number is left out of both."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

import srpo_dsl.rl.loop.figures as figures
import srpo_dsl.rl.loop.plots as plots
from srpo_dsl.runfolder import EVAL, METRICS, TRACES, read_dynamics, read_jsonl
from srpo_dsl.view.page import curves
from srpo_dsl.view.source import Source

BASE = {"grad_norm": 1.0, "response_length": 10.0, "mean_set_size": 1.5}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run's 4 steps of metrics (a return of 1e400 at step 3: infinity) and one evaluation."""
    folder = tmp_path_factory.mktemp("figures")
    rows = [
        {"step": s, **BASE, "return": 0.1 * s, "task_score": 0.2 * s, "role/solver/invalid_rate": 0.5 / s}
        for s in (1, 2, 3, 4)
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows).replace(
        '"return": 0.30000000000000004', '"return": 1e400'
    )
    assert "1e400" in text
    (folder / "metrics.jsonl").write_text(text)
    (folder / "eval.jsonl").write_text(
        json.dumps({"step": 0, "avg_at_k": 0.25, "pass_at_k": 0.5, "k": 4}) + "\n"
    )
    return folder


def viewed(run: Path) -> list[str]:
    """`srpo-dsl view`'s charts of the run (its metrics and evaluations as `load_source` reads them)."""
    source = Source(run / TRACES, [], None, None, read_jsonl(run / METRICS), read_jsonl(run / EVAL), [])
    return curves(source)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """(panel name, axes) of every panel drawn, by whichever command; `plot`'s figures are built, not
    rasterized (test_cli_train.py writes its PNGs)."""
    seen: list[tuple[str, object]] = []
    draw = figures.draw_panel
    monkeypatch.setattr(plots, "save", lambda fig, path: path)

    def record(ax, panel, smoothing=figures.SMOOTHING) -> None:
        draw(ax, panel, smoothing)
        seen.append((panel.name, ax))

    monkeypatch.setattr(figures, "draw_panel", record)
    return seen


def drawing(ax) -> tuple:
    """What an axes shows: its title, its lines' points, its limits."""
    lines = [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()]
    return ax.get_title(), lines, ax.get_xlim(), ax.get_ylim()


def test_the_viewer_and_plot_draw_the_same_figure_without_non_finite_points(run, drawn, tmp_path) -> None:
    svgs = viewed(run)
    shown = dict(drawn)
    drawn.clear()
    written = plots.write_plots(read_dynamics(run), tmp_path)
    plotted = dict(drawn[: len(shown)])  # the per-panel PNGs (then the combined one)
    names = ["return", "grad_norm", "response_length", "mean_set_size", "role_invalid_rate", "heldout"]
    assert list(shown) == list(plotted) == names and len(svgs) == len(names)
    assert [p.stem for p in written] == [*names, "training_dynamics"]
    for name in names:
        assert drawing(shown[name]) == drawing(plotted[name]), name
    (raw, _), (task, _) = (lines for lines in zip(*[iter(drawing(shown["return"])[1])] * 2))
    assert raw == ([1, 2, 4], [0.1, 0.2, 0.4])  # step 3's return (infinity) left out; its task score kept
    assert task[0] == [1, 2, 3, 4]
    assert "Return (mean; task score + invalid penalty)" in svgs[0] and ">task score</text>" in svgs[0]
    assert "<title>return at step 1: 0.1, 2: 0.2, 4: 0.4</title>" in svgs[0]  # exact values: its tooltip


def test_the_inline_svgs_fit_one_html_page(run) -> None:
    svgs = viewed(run)
    assert all(s.startswith('<svg class="chart" role="img" aria-label="') for s in svgs)
    page = "".join(svgs)
    assert "<?xml" not in page and "<!DOCTYPE" not in page and "http" not in page  # nothing to fetch
    ids = Counter(re.findall(r'\bid="([^"]+)"', page))
    assert ids and max(ids.values()) == 1  # several charts on one page: no id twice
    references = re.findall(r'(?:href="#|url\(#)([^")]+)', page)
    assert references and set(references) <= set(ids)  # each still points into its own chart
    assert viewed(run) == svgs  # the same bytes every time
    assert page.count(">step</text>") == len(svgs)  # text as text: no font file, searchable


def test_a_panel_without_points_says_no_data() -> None:
    panel = figures.Panel(
        "role_clip_fraction",
        "Clip fraction per role",
        [figures.Curve("solver", [1], [1e400])],
        "clip_fraction",
    )
    shown = figures.finite(panel.lines[0])
    assert (shown.steps, shown.values) == ([], [])
    svg = figures.svg_text(figures.Panel(panel.name, panel.title, [shown], panel.metric))
    assert ">no data</text>" in svg
