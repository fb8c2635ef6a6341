"""Bitwise-reproducible training on CPU: the one library switch a training loop turns on.

Some of PyTorch's CPU kernels add floats into shared memory from several threads with
atomic additions, so the order of the additions, and the last bits of the result, follow
thread scheduling. A training step meets one of them: `index_put_(accumulate=True)`, the
backward of indexing with a tensor of row ids. `backends.logprobs.response_logprobs` runs
each distinct prompt once and hands its KV cache and last position's output (hidden state, or
logits) to each of its G rollouts by such indexing (`cache.batch_select_indices(rows)`,
`first.logits[rows, -1]`), so the backward adds every rollout's gradient back into its
prompt's rows. With two threads
the rows are split in halves; when one prompt has rows in both halves both threads add
into its rows at once. In the quickstart that happened first at step 39, where the same
question was drawn twice into one batch, once in each half: the gradients differed in
the last bit, and the sampled trajectories parted a few steps later. With one thread, or
under `torch.use_deterministic_algorithms(True)`, PyTorch runs that kernel serially.

On CUDA deterministic mode also needs `CUBLAS_WORKSPACE_CONFIG` set before cuBLAS starts
and makes kernels without a deterministic version raise, so GPU runs are left as they
are (docs/training.md, "Reproducibility").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def deterministic_kernels(device: torch.device) -> Iterator[None]:
    """On CPU, PyTorch's deterministic kernels for the block (the previous setting comes back after it)."""
    if device.type != "cpu":
        yield
        return
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
