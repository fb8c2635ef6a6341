"""Checking sampled tokens: the counter noise recomputed in Python (`splitmix_uniform`) and Pearson's
statistic of draws against their probabilities (`chi_square`)."""

from __future__ import annotations

import torch


def splitmix_uniform(seed: int, position: int, entry: int) -> float:
    """The noise of `counter_uniform` in Python's unbounded integers, modulo 2^64 by hand."""
    full = (1 << 64) - 1

    def mix(z: int) -> int:
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & full
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB & full
        return z ^ (z >> 31)

    golden = 0x9E3779B97F4A7C15
    key = mix((seed + (position + 1) * golden) & full)
    return ((mix((key + (entry + 1) * golden) & full) >> 41) + 0.5) / 2**23


def chi_square(tokens: torch.Tensor, probs: list[float]) -> float:
    """Pearson's statistic of the drawn `tokens` against `probs` (tokens of probability 0: never drawn)."""
    counts = torch.bincount(tokens, minlength=len(probs)).double()
    expected = torch.tensor(probs, dtype=torch.float64) * len(tokens)
    assert (counts[expected == 0] == 0).all()
    kept = expected > 0
    return float(((counts[kept] - expected[kept]) ** 2 / expected[kept]).sum())
