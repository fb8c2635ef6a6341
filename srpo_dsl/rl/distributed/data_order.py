"""Which prompts a step trains on: the same on every machine (its seeds: `srpo_dsl.seeds`)."""

from __future__ import annotations

import torch

from srpo_dsl.seeds import seed_of


def step_prompts(num_tasks: int, batch: int, step: int, seed: int) -> list[int]:
    """Task indices of `step` (1-based): a fresh permutation per pass over the data, no repeats in a step."""
    per_pass = num_tasks // batch
    data_pass, j = divmod(step - 1, per_pass)
    order = torch.randperm(
        num_tasks, generator=torch.Generator().manual_seed(seed_of("data", seed, data_pass))
    )
    return order[j * batch : (j + 1) * batch].tolist()
