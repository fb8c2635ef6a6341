"""Training curves as inline SVG line charts: one chart per panel, one coloured line per series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT, PAD = 340, 200, 36
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


@dataclass(frozen=True)
class Series:
    name: str
    steps: Sequence[float]
    values: Sequence[float]


def _ticks(low: float, high: float) -> tuple[float, float]:
    """The axis range: the data's, widened when flat."""
    return (low - 0.5, high + 0.5) if high == low else (low, high)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def line_chart(title: str, series: Sequence[Series]) -> str:
    """An SVG chart with the x (step) and y ranges labelled, a legend, and a tooltip per point."""
    drawn = [s for s in series if s.steps]
    xs = [x for s in drawn for x in s.steps]
    ys = [y for s in drawn for y in s.values]
    if not xs:
        return ""
    (x0, x1), (y0, y1) = _ticks(min(xs), max(xs)), _ticks(min(ys), max(ys))
    left, bottom = PAD + 8, HEIGHT - PAD + 8
    sx = lambda x: left + (x - x0) / (x1 - x0) * (WIDTH - left - 10)  # noqa: E731
    sy = lambda y: bottom - (y - y0) / (y1 - y0) * (bottom - 28)  # noqa: E731
    parts = [
        f'<text class="title" x="{WIDTH / 2:.0f}" y="14" text-anchor="middle">{escape(title)}</text>',
        f'<path class="axis" d="M{left},28 L{left},{bottom} L{WIDTH - 10},{bottom}"/>',
        f'<text x="{left - 4}" y="32" text-anchor="end">{_fmt(y1)}</text>',
        f'<text x="{left - 4}" y="{bottom}" text-anchor="end">{_fmt(y0)}</text>',
        f'<text x="{left}" y="{bottom + 14}" text-anchor="middle">{_fmt(x0)}</text>',
        f'<text x="{WIDTH - 10}" y="{bottom + 14}" text-anchor="middle">{_fmt(x1)}</text>',
        f'<text x="{(left + WIDTH) / 2:.0f}" y="{bottom + 14}" text-anchor="middle">step</text>',
    ]
    for i, s in enumerate(drawn):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(s.steps, s.values))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{points}"/>')
        if len(s.steps) <= 25:  # few points (evaluations): marked, each with its value
            parts += [
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}">'
                f"<title>{escape(s.name)} at step {_fmt(x)}: {_fmt(y)}</title></circle>"
                for x, y in zip(s.steps, s.values)
            ]
        parts.append(
            f'<text x="{left + 8 + 90 * i}" y="{HEIGHT - 2}" fill="{colour}">■ {escape(s.name)}</text>'
        )
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT + 4}" width="{WIDTH}" height="{HEIGHT + 4}" '
        f'role="img" aria-label="{escape(title)}">' + "".join(parts) + "</svg>"
    )
