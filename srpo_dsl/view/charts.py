"""Training curves as inline SVG line charts: one chart per panel, one coloured line per series.

Axes are labelled at "nice" ticks (multiples of 1, 2 or 5 times a power of ten, covering the
data); a panel whose values are all the same says so in words instead of drawing a flat line,
and one without any point says it has no data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT, TOP = 340, 200, 28
RIGHT = WIDTH - 34  # the plot's right edge; "step" is written after it
BOTTOM = HEIGHT - 28  # the x axis
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
MOST_TICKS = 5  # intervals at most before the ends are rounded out to the step


@dataclass(frozen=True)
class Series:
    name: str
    steps: Sequence[float]
    values: Sequence[float]


def nice_step(span: float, intervals: int = MOST_TICKS) -> float:
    """The smallest of 1, 2, 5 times a power of ten that covers `span` in `intervals` steps."""
    raw = span / intervals
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def nice_ticks(low: float, high: float, integer: bool = False) -> list[float]:
    """Ticks at multiples of a nice step, from the last one at or below `low` to the first at or above
    `high` (`low < high`); `integer`: the step is at least 1."""
    step = nice_step(high - low)
    step = max(step, 1.0) if integer else step
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    digits = decimals(step)
    return [round(i * step, digits) + 0.0 for i in range(first, last + 1)]  # + 0.0: no -0.0


def decimals(step: float) -> int:
    """The decimals that show every multiple of `step` exactly (0.05 -> 2, 5 -> 0)."""
    return max(0, -math.floor(math.log10(step) + 1e-9))


def tick_label(x: float, ticks: Sequence[float]) -> str:
    return f"{x:.{decimals(ticks[1] - ticks[0])}f}"


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def x_ticks(xs: Sequence[float]) -> list[float]:
    """Steps are integers: one step alone gets a unit range around it (never below 0)."""
    low, high = min(xs), max(xs)
    if low == high:
        low, high = (low, low + 1) if low == 0 else (low - 1, high + 1)
    return nice_ticks(low, high, integer=True)


LARGEST = 1e300  # beyond it a range between two points is no float: such a point is not drawn


def plottable(s: Series) -> Series:
    """`s` without its points that are not finite numbers within `LARGEST` (a corrupted run's 1e400)."""
    ok = lambda v: abs(v) <= LARGEST  # noqa: E731 (False for NaN and infinity; exact for a 400-digit int)
    points = [(x, y) for x, y in zip(s.steps, s.values, strict=True) if ok(x) and ok(y)]
    return Series(s.name, [x for x, _ in points], [y for _, y in points])


def line_chart(title: str, series: Sequence[Series]) -> str:
    """An SVG chart: labelled nice ticks on both axes, a legend, a tooltip per point ("" for no series);
    a point that is not a finite number is left out (`plottable`)."""
    if not series:
        return ""
    drawn = [s for s in map(plottable, series) if s.steps]
    xs = [x for s in drawn for x in s.steps]
    ys = [y for s in drawn for y in s.values]
    if not xs:
        return _svg(title, [_note("no data")])
    if min(ys) == max(ys):
        return _svg(title, [_note(f"{', '.join(s.name for s in drawn)}: {_fmt(ys[0])} {_when(xs)}")])
    xt, yt = x_ticks(xs), nice_ticks(min(ys), max(ys))
    left = 12 + 6 * max(len(tick_label(y, yt)) for y in yt)
    sx = lambda x: left + (x - xt[0]) / (xt[-1] - xt[0]) * (RIGHT - left)  # noqa: E731
    sy = lambda y: BOTTOM - (y - yt[0]) / (yt[-1] - yt[0]) * (BOTTOM - TOP)  # noqa: E731
    parts = _axes(xt, yt, left, sx, sy)
    for i, s in enumerate(drawn):
        colour = COLOURS[i % len(COLOURS)]
        parts += _line(s, colour, sx, sy)
        parts.append(
            f'<text x="{left + 8 + 90 * i}" y="{HEIGHT - 2}" fill="{colour}">■ {escape(s.name)}</text>'
        )
    return _svg(title, parts)


def _when(xs: Sequence[float]) -> str:
    low, high = min(xs), max(xs)
    return f"at step {_fmt(low)}" if low == high else f"at every step ({_fmt(low)}–{_fmt(high)})"


def _axes(xt: Sequence[float], yt: Sequence[float], left: float, sx, sy) -> list[str]:
    """Grid lines at the y ticks, both axes, their tick labels, and "step" after the x axis."""
    parts = [f'<path class="grid" d="M{left},{sy(y):.1f} H{RIGHT}"/>' for y in yt[1:]]
    parts.append(f'<path class="axis" d="M{left},{TOP} V{BOTTOM} H{RIGHT}"/>')
    parts += [
        f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" text-anchor="end">{tick_label(y, yt)}</text>' for y in yt
    ]
    parts += [
        f'<text x="{sx(x):.1f}" y="{BOTTOM + 14}" text-anchor="middle">{tick_label(x, xt)}</text>' for x in xt
    ]
    return [*parts, f'<text x="{RIGHT + 6}" y="{BOTTOM + 4}">step</text>']


def _line(s: Series, colour: str, sx, sy) -> list[str]:
    """The series' polyline; few points (evaluations) are also marked, each with its value."""
    points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(s.steps, s.values))
    parts = [f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{points}"/>']
    if len(s.steps) <= 25:
        parts += [
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}">'
            f"<title>{escape(s.name)} at step {_fmt(x)}: {_fmt(y)}</title></circle>"
            for x, y in zip(s.steps, s.values)
        ]
    return parts


def _note(text: str) -> str:
    x, y = WIDTH / 2, (TOP + BOTTOM) / 2
    return f'<text class="note" x="{x:.0f}" y="{y:.0f}" text-anchor="middle">{escape(text)}</text>'


def _svg(title: str, parts: list[str]) -> str:
    head = f'<text class="title" x="{WIDTH / 2:.0f}" y="14" text-anchor="middle">{escape(title)}</text>'
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT + 4}" width="{WIDTH}" height="{HEIGHT + 4}" '
        f'role="img" aria-label="{escape(title)}">' + head + "".join(parts) + "</svg>"
    )
