"""Which prompts a step trains on, and the seeds of every random draw: the same on every machine."""

from __future__ import annotations

import zlib

import torch


def seed_of(*parts: object) -> int:
    """A stable 31-bit seed from any parts (same on every machine and run)."""
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def step_prompts(num_tasks: int, batch: int, step: int, seed: int) -> list[int]:
    """Task indices of `step` (1-based): a fresh permutation per pass over the data, no repeats in a step."""
    per_pass = num_tasks // batch
    data_pass, j = divmod(step - 1, per_pass)
    order = torch.randperm(
        num_tasks, generator=torch.Generator().manual_seed(seed_of("data", seed, data_pass))
    )
    return order[j * batch : (j + 1) * batch].tolist()
