"""Avg@k, Pass@k (unbiased estimator), cost proxies and the macro average, against hand values; the
held-out evaluation of training and the sweep's per-prompt outcomes compute them the same way."""

from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from srpo_dsl.runtime.episode import Cost
from srpo_dsl.runtime.metrics import (
    AtK,
    DatasetMetrics,
    at_k,
    dataset_metrics,
    is_correct,
    macro_average,
    pass_at_k,
    prompt_at_k,
)


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (4, 1, 1, 0.25),  # Pass@1 is the fraction correct
        (16, 4, 1, 0.25),
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4)
        (4, 0, 2, 0.0),
        (16, 0, 16, 0.0),  # nothing correct
        (4, 3, 2, 1.0),
        (4, 1, 4, 1.0),
        (16, 1, 16, 1.0),  # n - c < k: every draw of k holds a correct one
        (4, 4, 1, 1.0),
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_draw_probability(nck):
    """Brute force: the share of k-subsets of n samples (c correct) holding a correct one."""
    n, c, k = nck
    subsets = list(combinations(range(n), k))
    hit = sum(any(i < c for i in s) for s in subsets)
    assert pass_at_k(n, c, k) == pytest.approx(float(Fraction(hit, len(subsets))), abs=1e-12)
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)


def test_pass_at_k_large_n_stays_exact():
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    assert pass_at_k(1000, 10, 100) == pytest.approx(1 - comb(990, 100) / comb(1000, 100), rel=1e-9)


@pytest.mark.parametrize("n, c, k", [(4, 5, 2), (4, -1, 2), (4, 1, 0), (4, 1, 5), (0, 0, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="need 0 <= c <= n"):
        pass_at_k(n, c, k)


@dataclass
class Ep:
    """Just what `dataset_metrics` reads from an episode."""

    prompt_id: str
    reward: float
    cost: Cost = field(default_factory=lambda: Cost(0, 0, 0))


def _episodes() -> list[Ep]:
    """Three queries, four samples each (k = 2 < n = 4)."""
    q1 = [Ep("q1", 1.0, Cost(tokens=10, calls=3, tool_calls=0))] + [
        Ep("q1", 0.0, Cost(tokens=10, calls=3, tool_calls=0)) for _ in range(3)
    ]
    q2 = [
        Ep("q2", s, Cost(tokens=20, calls=5, tool_calls=2)) for s in (1.0, 1.0, 0.0, 0.5)
    ]  # F1 0.5: not correct
    q3 = [Ep("q3", s, Cost(tokens=30, calls=1, tool_calls=1)) for s in (0.0, -0.1, 0.0, 0.0)]
    return [
        ep for group in zip(q1, q2, q3) for ep in group
    ]  # interleaved, as a batched executor returns them


def test_dataset_metrics_hand_values():
    m = dataset_metrics("toy", _episodes(), k=2)
    assert (m.name, m.queries, m.samples, m.k) == ("toy", 3, 4, 2)
    # Avg@k: per-query fraction correct 1/4, 2/4, 0 -> mean 1/4.
    assert m.avg_at_k == pytest.approx(0.25)
    # Pass@2: q1 (n=4, c=1) 1 - 3/6 = 1/2; q2 (c=2) 1 - 1/6 = 5/6; q3 0 -> mean 4/9.
    assert m.pass_at_k == pytest.approx((0.5 + 5 / 6 + 0) / 3)
    # Costs: mean over the 12 episodes (4 of each query).
    assert m.tokens_per_episode == pytest.approx((10 + 20 + 30) / 3)
    assert m.calls_per_episode == pytest.approx((3 + 5 + 1) / 3)
    # Tool calls to answer one query: 0, 2 and 1 per episode -> 1, whatever the number of samples.
    assert m.tool_calls_per_query == pytest.approx(1.0)


def test_dataset_metrics_with_n_equal_k_and_pass_at_1():
    eps = _episodes()
    m4 = dataset_metrics("toy", eps, k=4)
    assert m4.avg_at_k == pytest.approx(0.25) and m4.pass_at_k == pytest.approx(2 / 3)  # q1 and q2 solved
    m1 = dataset_metrics("toy", eps, k=1)
    assert m1.pass_at_k == pytest.approx(m1.avg_at_k)  # Pass@1 = Avg@1


def test_dataset_metrics_errors():
    with pytest.raises(ValueError, match="toy: no episodes"):
        dataset_metrics("toy", [], k=1)
    with pytest.raises(ValueError, match=r"toy: Pass@8 needs 8 samples per query; 3 queries have fewer"):
        dataset_metrics("toy", _episodes(), k=8)


def test_macro_average_is_unweighted():
    big = DatasetMetrics("math500", 500, 16, 16, 0.6, 0.9, 100.0, 5.0, 0.0)
    small = DatasetMetrics("aime", 30, 16, 16, 0.1, 0.3, 300.0, 5.0, 0.0)
    assert macro_average([big, small]) == pytest.approx((0.35, 0.6))
    assert macro_average([big]) == (0.6, 0.9)
    with pytest.raises(ValueError, match="no datasets"):
        macro_average([])


def test_at_k_is_the_mean_over_prompts_of_each_prompts_outcome():
    assert prompt_at_k(4, 1, 2) == AtK(0.25, 0.5)
    assert prompt_at_k(4, 0, 4) == AtK(0.0, 0.0) and prompt_at_k(4, 2, 4) == AtK(0.5, 1.0)
    # q1 (n=4, c=1): 1/4 and 1/2; q2 (c=2): 1/2 and 5/6; q3 (c=0): 0 and 0
    got = at_k([(4, 1), (4, 2), (4, 0)], 2)
    assert got.avg_at_k == pytest.approx(0.25) and got.pass_at_k == pytest.approx((0.5 + 5 / 6) / 3)
    assert at_k([], 2) == AtK(0.0, 0.0)
    assert macro_average([AtK(0.5, 1.0), AtK(0.25, 0.5)]) == AtK(0.375, 0.75)
    assert is_correct(1.0) and is_correct(1.0 - 1e-12) and not is_correct(0.99) and not is_correct(1.0 - 1e-6)


def test_training_and_eval_give_the_same_avg_and_pass_for_the_same_outcomes():
    """`rl/loop/heldout.py` (per-prompt correct counts of k samples) and `dataset_metrics` (episodes) agree."""
    from srpo_dsl.rl.loop.heldout import EvalSet, heldout_row

    eps = _episodes()
    m = dataset_metrics("toy", eps, k=4)
    correct = [sum(is_correct(e.reward) for e in eps if e.prompt_id == q) for q in ("q1", "q2", "q3")]
    row = heldout_row([EvalSet("toy", [{}, {}, {}])], [correct], k=4, step=0)
    assert row["datasets"]["toy"] == {"avg_at_k": m.avg_at_k, "pass_at_k": m.pass_at_k, "n_prompts": 3}
    assert (row["avg_at_k"], row["pass_at_k"]) == macro_average([m])
