"""The range of every metric srpo-dsl plots or reports: the one table (`RANGES`) that `plot`'s PNGs, a
sweep's curves.png and dynamics.png and its bootstrap intervals take them from.

A band or an interval around a bounded metric is clipped to its range: a mean ± std of Pass@k values
near 1 would otherwise reach past 100%, a mean ± std of a gradient norm near 0 below 0. An unbounded
metric (the return) keeps its band as computed."""

from __future__ import annotations

import math

import numpy as np

Range = tuple[float, float]
FRACTION: Range = (0.0, 1.0)  # a share: Avg@k, Pass@k, a clip fraction, an invalid-output rate
NONNEGATIVE: Range = (0.0, math.inf)  # a norm, a length, a count, a time
UNBOUNDED: Range = (-math.inf, math.inf)  # a return, a task score (a reward may give any number)

RANGES: dict[str, Range] = {  # metric (metrics.jsonl's, eval.jsonl's, a sweep's) -> its range
    "avg_at_k": FRACTION,
    "pass_at_k": FRACTION,
    "clip_fraction": FRACTION,
    "invalid_rate": FRACTION,
    "return": UNBOUNDED,
    "task_score": UNBOUNDED,
    "grad_norm": NONNEGATIVE,
    "grad_norm_cv": NONNEGATIVE,
    "abs_advantage": NONNEGATIVE,
    "response_length": NONNEGATIVE,
    "mean_set_size": NONNEGATIVE,
    "tokens_per_episode": NONNEGATIVE,
    "calls_per_episode": NONNEGATIVE,
    "wall_s": NONNEGATIVE,
}


def range_of(metric: str, scale: float = 1.0) -> Range:
    """`metric`'s range times `scale` (PERCENT: as shown in percent); a per-role or per-event key
    (`role/ROLE/clip_fraction`) has its last part's. KeyError: a metric the table does not hold."""
    low, high = RANGES[metric.rsplit("/", 1)[-1]]
    return low * scale, high * scale


def difference_range(bounds: Range) -> Range:
    """The range of a difference of two values in `bounds` (a cell's Pass@k minus the baseline's)."""
    low, high = bounds
    return low - high, high - low


def band(mean: np.ndarray, spread: np.ndarray, bounds: Range) -> tuple[np.ndarray, np.ndarray]:
    """mean - spread and mean + spread, each clipped to `bounds`."""
    return np.clip(mean - spread, *bounds), np.clip(mean + spread, *bounds)
