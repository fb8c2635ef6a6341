"""The per-GPU lower bound on training memory (rl/fit.py) against hand-computed bytes, and its message."""

from __future__ import annotations

import pytest

from srpo_dsl.rl.fit import Layout, fit_problem, training_bytes

B = 10**9  # parameters


@pytest.mark.parametrize(
    ("zero", "world", "offload", "backend", "expected"),
    [
        (0, 1, "none", "hf", 2 + 2 + 12),  # weights, gradients, fp32 master + Adam moments
        (1, 4, "none", "hf", 2 + 2 + 12 / 4),  # optimizer state split
        (2, 4, "none", "hf", 2 + (2 + 12) / 4),  # and gradients
        (3, 4, "none", "hf", (2 + 2 + 12) / 4 + 2),  # and weights; the hf engine's full copy on top
        (3, 4, "none", "vllm", (2 + 2 + 12) / 4),  # vllm holds its own copy (its memory share aside)
        (2, 1, "optimizer", "hf", 2 + 2),  # optimizer state on the CPU
        (3, 2, "all", "vllm", 2 / 2),  # parameters and optimizer on the CPU: the gradient shard stays
    ],
)
def test_training_bytes_by_stage(zero, world, offload, backend, expected):
    assert training_bytes(B, B, Layout(zero, world, offload, backend)) == pytest.approx(expected * B)


def test_frozen_base_with_adapters_counts_weights_only():
    # a base hosting adapters is in an engine but trains (almost) nothing: its weights alone
    assert training_bytes(B, 0, Layout(2, 8, "none", "hf")) == 2 * B


def test_fit_problem_names_the_stage_and_the_largest_policy():
    layout = Layout(0, 1, "none", "hf")
    needed = {"solver": 16.0 * 2**30, "judge": 4.0 * 2**30}
    assert fit_problem(needed, 20.0 * 2**30, layout) is None
    message = fit_problem(needed, 19.5 * 2**30, layout)
    assert message.startswith("the policies' weights, gradients and optimizer states need at least 20.0 GiB")
    assert (
        "ZeRO-0 on 1 GPU(s) (`solver` alone 16.0 GiB), more than the GPU's 19.5 GiB: use --zero 3" in message
    )
    assert "\n" not in message
