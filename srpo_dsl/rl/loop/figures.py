"""The one source of a run's curve figures: which panels a run has (`panels`), what each draws (its lines,
title, axes, range; points that are not finite numbers left out) and the matplotlib figure of it
(`figure`). `srpo-dsl plot` saves these figures as PNG (rl/loop/plots.py); `srpo-dsl view` inlines the
same figures as SVG text (`svg_text`). Matplotlib draws through Agg/SVG canvases only, never a GUI."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from srpo_dsl.rl.loop.ranges import Range, range_of
from srpo_dsl.runfolder import PANELS, PERCENT, ROLE_PANELS, Dynamics, EvalCurve

if TYPE_CHECKING:  # matplotlib loads when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

EVAL_PANEL = "heldout"  # eval.jsonl -> heldout.png: Avg@k and Pass@k over steps (others: runfolder.PANELS)
SMOOTHING = 0.9  # the EMA factor of the solid lines
LARGEST = 1e300  # beyond it a range between two points is no float: such a point is not drawn
RETURN_LINES = {"return": "return", "task_score": "task score"}  # the return panel's lines -> legend
PANEL_SIZE = (5.0, 3.5)  # inches, one panel


@dataclass(frozen=True)
class Curve:
    label: str
    steps: Sequence[float]
    values: Sequence[float]


@dataclass(frozen=True)
class Panel:
    """One chart: `name` (its PNG's stem), its title, its lines (finite points only), the metric whose
    range bounds its y axis (`scale`: PERCENT for Avg@k), and whether its lines are smoothed (EMA)."""

    name: str
    title: str
    lines: list[Curve]
    metric: str
    scale: float = 1.0
    smoothed: bool = True


def finite(line: Curve) -> Curve:
    """`line` without its points that are not finite numbers within `LARGEST` (a corrupted run's 1e400)."""
    ok = lambda v: abs(v) <= LARGEST  # noqa: E731 (False for NaN and infinity)
    points = [(x, y) for x, y in zip(line.steps, line.values, strict=True) if ok(x) and ok(y)]
    return Curve(line.label, [x for x, _ in points], [y for _, y in points])


def metric_panel(dynamics: Dynamics, key: str) -> Panel:
    """A PANELS metric; the return panel also draws the task score when the run logged it."""
    keys = [k for k in RETURN_LINES if k in dynamics.series] if key == "return" else [key]
    lines = [Curve(RETURN_LINES.get(k, k), dynamics.steps, dynamics.series[k]) for k in keys]
    values = finite(lines[0]).values if lines else []
    title = PANELS[key]
    if key == "grad_norm" and values:
        mean = sum(values) / len(values)
        cv = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 / mean if mean > 0 else 0.0
        title += f" (CV {cv:.2f})"
    return Panel(key, title, [finite(line) for line in lines], key)


def heldout_panel(curve: EvalCurve) -> Panel:
    lines = [
        Curve(f"Avg@{curve.k}", curve.steps, curve.avg),
        Curve(f"Pass@{curve.k}", curve.steps, curve.passed),
    ]
    title = f"Held-out Avg@{curve.k} / Pass@{curve.k} (%)"
    return Panel(EVAL_PANEL, title, [finite(line) for line in lines], "avg_at_k", PERCENT, smoothed=False)


def panels(dynamics: Dynamics) -> list[Panel]:
    """Every panel of the run, in order: the PANELS metrics it logged, the per-role ones (ROLE_PANELS)
    it logged, then the held-out curve when it was evaluated."""
    out = [metric_panel(dynamics, key) for key in PANELS if key in dynamics.series]
    for metric, series in dynamics.roles.items():
        lines = [finite(Curve(s.role, s.steps, s.values)) for s in series]
        out.append(Panel(f"role_{metric}", ROLE_PANELS[metric], lines, metric))
    return out + ([heldout_panel(dynamics.curve)] if dynamics.curve is not None else [])


def ema(values: Sequence[float], alpha: float) -> list[float]:
    """s_t = alpha s_{t-1} + (1 - alpha) x_t, started at x_0."""
    out, s = [], values[0] if values else 0.0
    for x in values:
        s = alpha * s + (1 - alpha) * x
        out.append(s)
    return out


def step_axis(ax: Axes) -> None:
    """An x axis of training steps: labelled, ticked at whole steps only."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def keep_in_range(ax: Axes, bounds: Range) -> None:
    """The y axis, once everything is drawn, cut to the metric's range (`ranges.RANGES`): no margin
    below 0 for a norm, above 100% for Pass@k. Values outside it (a file not ours) keep the axis whole."""
    low, high = ax.get_ylim()
    low, high = max(low, bounds[0]), min(high, bounds[1])
    if low < high:
        ax.set_ylim(low, high)


def draw_panel(ax: Axes, panel: Panel, smoothing: float = SMOOTHING) -> None:
    """Smoothed lines: raw values faint, their EMA solid; the held-out curve: marked points. A legend
    when there are several lines; "no data" when no line has a point."""
    for i, line in enumerate(panel.lines):
        if panel.smoothed:
            raw = ax.plot(line.steps, line.values, alpha=0.25, linewidth=1, gid=f"curve{i}")[0]
            solid = ema(line.values, smoothing)
            ax.plot(line.steps, solid, color=raw.get_color(), linewidth=2, label=line.label)
        else:
            ax.plot(
                line.steps, line.values, marker="os"[i % 2], linewidth=2, label=line.label, gid=f"curve{i}"
            )
    ax.set_title(panel.title)
    step_axis(ax)
    if panel.scale != 1.0:
        ax.set_ylim(*range_of(panel.metric, panel.scale))
    else:
        keep_in_range(ax, range_of(panel.metric))
    if not any(line.steps for line in panel.lines):
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    elif len(panel.lines) > 1:
        ax.legend(loc="lower right" if panel.name == EVAL_PANEL else "best")
    ax.grid(alpha=0.3)


def figure(shown: Sequence[Panel], smoothing: float = SMOOTHING) -> Figure:
    """One matplotlib Figure with `shown` side by side (no pyplot: nothing global, no GUI backend), in
    fixed margins (`plots.save` fits them to the labels for a PNG; a page's SVG skips that second draw)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(PANEL_SIZE[0] * len(shown), PANEL_SIZE[1]))
    FigureCanvasAgg(fig)  # drawn by Agg (a PNG; SVG when saved so)
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    for ax, panel in zip(axes, shown):
        draw_panel(ax, panel, smoothing)
    n = len(shown)
    fig.subplots_adjust(left=0.16 / n, right=1 - 0.04 / n, bottom=0.14, top=0.88, wspace=0.3)
    return fig


NO_METADATA = dict.fromkeys(("Creator", "Date", "Format", "Type"))  # no <metadata> (its URLs), same bytes
NAMESPACES = re.compile(r' xmlns(?::xlink)?="[^"]*"')  # implied for an <svg> inside HTML
REFERENCES = re.compile(r'(\bid="|href="#|url\(#)')  # an element's id and every reference to one


def svg_text(panel: Panel, smoothing: float = SMOOTHING) -> str:
    """The panel's figure as an `<svg>` element to inline in HTML: no XML prolog, doctype, metadata or
    namespace URLs; text as <text> (no font file); every element id prefixed with the panel's name
    (several charts on one page), hashed ids salted with it (the same bytes each time)."""
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": panel.name}):
        buffer = io.StringIO()
        figure([panel], smoothing).savefig(buffer, format="svg", metadata=NO_METADATA)
    text = buffer.getvalue()
    svg = NAMESPACES.sub("", text[text.index("<svg") :])
    svg = REFERENCES.sub(lambda m: f"{m.group(1)}{panel.name}-", svg)
    for i, line in enumerate(panel.lines):  # each curve's exact values: its tooltip
        group = f'<g id="{panel.name}-curve{i}">'
        svg = svg.replace(group, f"{group}<title>{escape(tooltip(line))}</title>", 1)
    return svg.replace("<svg ", f'<svg class="chart" role="img" aria-label="{escape(panel.title)}" ', 1)


def tooltip(line: Curve, most: int = 25) -> str:
    """`line`'s points as text, `return at step 1: 0.3945, ...` (the first and last `most` // 2 of more)."""
    points = [f"{x:g}: {y:.4g}" for x, y in zip(line.steps, line.values)]
    if len(points) > most:
        points = [*points[: most // 2], "…", *points[-(most // 2) :]]
    return f"{line.label} at step " + ", ".join(points)
