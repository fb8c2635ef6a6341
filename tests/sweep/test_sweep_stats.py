"""The statistics of `srpo-dsl sweep`: spreads over seeds, the paired bootstrap, the held-out row."""

import math

import numpy as np
import pytest

from srpo_dsl.rl.loop.heldout import EvalSet, heldout_row
from srpo_dsl.runtime.metrics import at_k
from srpo_dsl.sweep.results import outcome
from srpo_dsl.sweep.stats import paired_bootstrap, spread


def test_spread_is_mean_and_sample_std():
    s = spread([1.0, 2.0, 4.0])  # mean 7/3; squared deviations 16/9 + 1/9 + 25/9 = 42/9; / (n - 1) = 7/3
    assert s.mean == pytest.approx(7 / 3) and s.std == pytest.approx(math.sqrt(7 / 3)) and s.n == 3
    one = spread([5.0])
    assert one.mean == 5.0 and math.isnan(one.std)
    assert spread([]).n == 0


def test_constant_differences_give_a_point_interval():
    d = paired_bootstrap([np.full((3, 10), 2.5), np.full((3, 4), -0.5)])
    assert (d.mean, d.low, d.high) == (pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0))
    assert d.n_seeds == 3 and d.n_prompts == 14


def test_point_estimate_is_the_macro_mean_and_the_interval_is_reproducible():
    a = np.array([[0.0, 1.0], [1.0, 1.0]])  # mean 0.75
    b = np.array([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])  # mean 0.125
    d = paired_bootstrap([a, b])
    assert d.mean == pytest.approx((0.75 + 0.125) / 2)
    assert d == paired_bootstrap([a, b])
    assert 0.0 <= d.low <= d.mean <= d.high <= 1.0


def test_two_seeds_one_prompt_has_three_hand_computed_outcomes():
    # seeds resampled from {0, 2}: both 0 (p = 1/4), one each (1/2), both 2 (1/4) -> replicate means 0, 1, 2
    d = paired_bootstrap([np.array([[0.0], [2.0]])], replicates=4000)
    assert d.mean == 1.0 and d.low == 0.0 and d.high == 2.0


def test_interval_matches_the_normal_theory_width():
    # one seed, 2000 prompts of N(0.3, 1): the mean's 95% interval is about 0.3 ± 1.96 / sqrt(2000)
    rng = np.random.default_rng(7)
    x = rng.normal(0.3, 1.0, size=(1, 2000))
    d = paired_bootstrap([x])
    half = 1.96 * x.std(ddof=1) / math.sqrt(2000)
    assert d.low == pytest.approx(x.mean() - half, abs=0.2 * half)
    assert d.high == pytest.approx(x.mean() + half, abs=0.2 * half)
    assert d.low < 0.3 < d.high


def test_seed_spread_widens_the_interval():
    # the same prompt noise, but seeds that disagree: resampling seeds must widen the interval
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 0.5, size=(4, 200))
    agree = paired_bootstrap([noise + 1.0])
    disagree = paired_bootstrap([noise + np.array([[0.0], [2.0], [0.5], [1.5]])])
    assert (disagree.high - disagree.low) > 3 * (agree.high - agree.low)


def test_mismatched_seeds_are_refused():
    with pytest.raises(ValueError, match="same seeds"):
        paired_bootstrap([np.zeros((2, 3)), np.zeros((3, 3))])
    with pytest.raises(ValueError, match="non-empty"):
        paired_bootstrap([])


def test_heldout_row_is_the_macro_mean_of_per_prompt_outcomes():
    sets = [EvalSet("a", [{}, {}]), EvalSet("b", [{}, {}, {}, {}])]
    row = heldout_row(sets, [[4, 1], [0, 0, 2, 4]], k=4, step=7)
    # a: Avg (1 + 0.25) / 2 = 0.625, Pass 1; b: Avg (0 + 0 + 0.5 + 1) / 4 = 0.375, Pass 2 / 4 = 0.5
    assert row["datasets"] == {
        "a": {"avg_at_k": 0.625, "pass_at_k": 1.0, "n_prompts": 2},
        "b": {"avg_at_k": 0.375, "pass_at_k": 0.5, "n_prompts": 4},
    }
    assert (row["avg_at_k"], row["pass_at_k"], row["n_prompts"], row["step"]) == (0.5, 0.75, 6, 7)


def test_the_paired_outcomes_average_to_the_logged_avg_and_pass():
    """Per prompt (c of k = 4 correct): Avg c / 4, Pass 1 when any is; their means are the dataset's."""
    correct = [4, 1, 0, 2]
    assert outcome(correct, 4, "avg_at_k").tolist() == [1.0, 0.25, 0.0, 0.5]
    assert outcome(correct, 4, "pass_at_k").tolist() == [1.0, 1.0, 0.0, 1.0]
    logged = at_k([(4, c) for c in correct], 4)
    assert outcome(correct, 4, "avg_at_k").mean() == logged.avg_at_k
    assert outcome(correct, 4, "pass_at_k").mean() == logged.pass_at_k
