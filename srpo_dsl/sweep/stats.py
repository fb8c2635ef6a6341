"""Mean ± sample standard deviation over seeds, and the paired bootstrap of a difference between cells.

The paired bootstrap is two-stage (hierarchical) over (seed, prompt): each replicate draws the
seeds with replacement, then, within each drawn seed, the prompts of every dataset with
replacement, and takes the macro mean over datasets of the mean paired difference. Seeds are
the independent training runs, so resampling them carries the run-to-run variance; prompts are
a sample of the task, so resampling them within a seed carries the evaluation's sampling
noise. Resampling prompts alone would ignore the seed spread (too narrow with few seeds);
resampling seeds alone would leave three seeds only ten distinct replicates. The interval is
the 2.5th and 97.5th percentiles of the replicates (a percentile interval), within the range of
the difference (`ranges.difference_range`); the generator has a fixed seed, so the same inputs give
the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from srpo_dsl.rl.loop.ranges import UNBOUNDED, Range

BOOTSTRAP_SEED = 0
REPLICATES = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Spread:
    """Mean and sample standard deviation (ddof = 1; NaN with one value) of n values."""

    mean: float
    std: float
    n: int


def spread(values: Sequence[float]) -> Spread:
    if not values:
        return Spread(math.nan, math.nan, 0)
    mean = sum(values) / len(values)
    if len(values) < 2:
        return Spread(mean, math.nan, len(values))
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return Spread(mean, math.sqrt(var), len(values))


@dataclass(frozen=True)
class Difference:
    """A paired difference (cell - baseline) with its bootstrap percentile interval over n_seeds seeds."""

    mean: float
    low: float
    high: float
    n_seeds: int
    n_prompts: int  # summed over datasets


def paired_bootstrap(
    differences: Sequence[np.ndarray],
    replicates: int = REPLICATES,
    level: float = LEVEL,
    seed: int = BOOTSTRAP_SEED,
    bounds: Range = UNBOUNDED,
) -> Difference:
    """`differences[d]` is a seeds x prompts array of dataset d (same seeds, in the same order, in all);
    `bounds`: the range a difference can take, which the interval stays in.

    The point estimate is the macro mean over datasets of the mean over seeds and prompts.
    """
    if not differences or any(d.ndim != 2 or d.size == 0 for d in differences):
        raise ValueError("paired bootstrap: need one non-empty seeds x prompts array per dataset")
    n_seeds = differences[0].shape[0]
    if any(d.shape[0] != n_seeds for d in differences):
        raise ValueError("paired bootstrap: every dataset needs the same seeds")
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, n_seeds, size=(replicates, n_seeds))
    per_dataset = []
    for d in differences:
        prompts = rng.integers(0, d.shape[1], size=(replicates, n_seeds, d.shape[1]))
        per_dataset.append(d[seeds[:, :, None], prompts].mean(axis=(1, 2)))
    stats = np.mean(per_dataset, axis=0)
    tail = (1 - level) / 2 * 100
    low, high = np.clip(np.percentile(stats, [tail, 100 - tail]), *bounds)
    point = float(np.mean([d.mean() for d in differences]))
    return Difference(point, float(low), float(high), n_seeds, sum(d.shape[1] for d in differences))
