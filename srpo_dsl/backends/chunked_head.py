"""The output head applied a chunk of tokens at a time, so that scoring never holds `[rows, T, V]` logits.

A causal LM ends in `lm_head(hidden)`: at a 151,936-token vocabulary its logits, their float32 copies
and their gradient outweigh the rest of a small model's training step. `output_head(model)` swaps the
head for a pass-through for the block, so the model returns its last hidden states `[rows, T, H]`
where it returned logits; the caller gathers the positions it scores, and `over_chunks` applies the
real head to them a chunk of tokens at a time, each chunk under `torch.utils.checkpoint`
(non-reentrant): the forward keeps a chunk's hidden states only, and the backward recomputes one
chunk's logits at a time. The head runs twice per token under grad (a `2 * H * V` matmul more per
token), never over more tokens than `budget` bytes of float32 logits hold, and as one call of its
module per scoring (ZeRO-3 gathers its weight once a pass, whatever the chunk count).

Only models whose head is a plain `nn.Linear` and whose forward applies nothing after it qualify
(`PLAIN_HEADS`, by `config.model_type`); any other (Gemma 2's soft-capping, Cohere's `logit_scale`,
Granite's `logits_scaling`, a LoRA or `modules_to_save` head) keeps its logits: `output_head` yields
None and the model runs as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import MethodType
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # transformers loads with a model
    from transformers import PreTrainedModel
from torch.utils.checkpoint import checkpoint

# transformers' `*ForCausalLM` forwards that return `lm_head(hidden[:, kept])` as the logits, nothing after
PLAIN_HEADS = frozenset({"llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})

_CHUNKED = [True]  # cleared by `full_logits`


@contextmanager
def full_logits() -> Iterator[None]:
    """For the block, every model returns its logits whole (no chunked head): the reference path."""
    previous, _CHUNKED[0] = _CHUNKED[0], False
    try:
        yield
    finally:
        _CHUNKED[0] = previous


def causal_lm(model: torch.nn.Module) -> PreTrainedModel | None:
    """The transformers model inside DeepSpeed's engine (`.module`) and peft's wrapper, or None."""
    from transformers import PreTrainedModel

    found: object = model
    for _ in range(3):  # engine -> peft model -> transformers model
        if isinstance(found, PreTrainedModel):
            return found
        base = getattr(found, "get_base_model", None)
        found = base() if callable(base) else getattr(found, "module", None)
    return None


def plain_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """`model`'s output head when it is a plain `nn.Linear` on a `PLAIN_HEADS` architecture (and chunking
    is on), else None."""
    lm = causal_lm(model)
    if not _CHUNKED[0] or lm is None or getattr(lm.config, "model_type", None) not in PLAIN_HEADS:
        return None
    head = lm.get_output_embeddings()
    return head if type(head) is torch.nn.Linear else None


@contextmanager
def output_head(model: torch.nn.Module) -> Iterator[torch.nn.Linear | None]:
    """For the block, `model`'s head swapped for a pass-through (its `.logits` are then the last hidden
    states), yielding the head; None, and the model as it is, where the head does not qualify."""
    head = plain_head(model)
    if head is None:
        yield None
        return
    lm = causal_lm(model)
    lm.set_output_embeddings(torch.nn.Identity())
    try:
        yield head
    finally:
        lm.set_output_embeddings(head)


def over_chunks(
    head: torch.nn.Linear,
    hidden: torch.Tensor,
    score: Callable[..., tuple[torch.Tensor, ...]],
    *per_token: torch.Tensor,
    budget: int,
) -> tuple[torch.Tensor, ...]:
    """`score(head(hidden[c]), *(t[c] for t in per_token))` over chunks c of the `[N, H]` tokens, each
    returning `[len(c)]` tensors, concatenated to `[N]`; a chunk holds at most `budget` bytes of float32
    logits (one token at least), and its logits are recomputed in the backward, not kept.

    The chunks run inside one call of the head module (its forward, for the call, is the chunk loop):
    ZeRO-3's hooks gather its weight once for the forward and once before the backward, whatever the
    chunk count, so ranks scoring different numbers of tokens stay in step."""
    step = max(1, budget // (4 * head.out_features))

    def chunked(module: torch.nn.Linear, states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pieces = [
            checkpoint(
                _scored,
                module,
                score,
                states[start : start + step],
                *(t[start : start + step] for t in per_token),
                use_reentrant=False,
                preserve_rng_state=False,  # a linear head draws nothing
            )
            for start in range(0, max(1, states.shape[0]), step)  # no tokens: one empty chunk
        ]
        return tuple(torch.cat(parts) for parts in zip(*pieces))

    own = head.__dict__.get("forward")
    head.forward = MethodType(chunked, head)
    try:
        return head(hidden)
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own


def _scored(
    head: torch.nn.Linear, score: Callable[..., tuple[torch.Tensor, ...]], hidden: torch.Tensor, *rest: object
) -> tuple[torch.Tensor, ...]:
    """One chunk's scores; the head's weight read directly (in the backward's recompute, as gathered for
    its backward)."""
    return score(F.linear(hidden, head.weight, head.bias), *rest)
