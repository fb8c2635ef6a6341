"""One token of the `static` and `compiled` decode loops, as one function over buffers of one shape.

A shape (rows, cache length) owns its buffers for the run (`DecodeBuffers`): the KV cache, the attention
mask, the sampled tokens and log-probs, the rows' limits and end flags, the response position, the draw's
settings and penalty state (`draw.DrawState`; the `[rows, V]` penalty state only in buffers keyed for
penalties). `decode_step` feeds the last token (mask column, position, the model's call on the static
cache), then `record` draws the next (`draw.draw`: the controls, the counter noise), scores it with the
trainer's definition (`log_softmax(logits / T)` at the token) and updates the counts and end flags, all
in place. Nothing in it is a Python number that changes per token, so under `torch.compile`
(`compiled`) the whole step is one graph (CUDA graphs on CUDA: one launch per token), and the loop
around it only asks the host whether every row has ended every few steps.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.cache_utils import StaticCache
from transformers.masking_utils import create_masks_for_generate

from srpo_dsl.backends.draw import DrawState, Shaping, count, draw

# the mask builder's cache argument: `cache` since transformers 5.2x, `past_key_values` before
CACHE_ARGUMENT = (
    "cache" if "cache" in inspect.signature(create_masks_for_generate).parameters else "past_key_values"
)


@dataclass
class DecodeBuffers:
    """Everything one decode step reads and writes, for `rows` rows and a cache of `length` tokens."""

    cache: StaticCache
    mask: torch.Tensor  # [rows, length] long: the cache columns attended (prompt, then fed tokens)
    tokens: torch.Tensor  # [rows, length] long: response token t at column t
    logprobs: torch.Tensor  # [rows, length] float32
    picked: torch.Tensor  # [rows] long: the token drawn last (fed next)
    ended: torch.Tensor  # [rows] bool
    limits: torch.Tensor  # [rows] long: each row's token limit
    position: torch.Tensor  # [rows, 1] long: the position id of the token fed last
    t: torch.Tensor  # [] long: the response position of the next draw
    width: torch.Tensor  # [] long: the prompt's columns
    draw: DrawState

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.mask.shape)  # type: ignore[return-value]

    @property
    def key(self) -> tuple[int, int, bool]:
        """(rows, length, penalized): buffers with penalty state are another shape's."""
        return (*self.shape, self.draw.counts is not None)


def new_buffers(model: PreTrainedModel, rows: int, length: int, penalized: bool = False) -> DecodeBuffers:
    """Buffers of one shape on the model's device (with the `[rows, V]` penalty state when `penalized`),
    their addresses marked static (a CUDA graph recorded on them replays on them)."""
    device = next(model.parameters()).device
    long = {"dtype": torch.long, "device": device}
    matrix = lambda dtype: torch.zeros(rows, length, dtype=dtype, device=device)  # noqa: E731
    scalar = lambda dtype: torch.zeros((), dtype=dtype, device=device)  # noqa: E731
    buffers = DecodeBuffers(
        StaticCache(config=model.config, max_cache_len=length),
        matrix(torch.long),
        matrix(torch.long),
        matrix(torch.float32),
        torch.zeros(rows, **long),
        torch.zeros(rows, dtype=torch.bool, device=device),
        torch.zeros(rows, **long),
        torch.zeros(rows, 1, **long),
        scalar(torch.long),
        scalar(torch.long),
        DrawState.empty(rows, vocab_size(model.config), penalized, device),
    )
    for name, value in vars(buffers).items():
        if name not in ("cache", "draw"):
            torch._dynamo.mark_static_address(value)
    for value in buffers.draw.tensors():
        torch._dynamo.mark_static_address(value)
    return buffers


def vocab_size(config: PretrainedConfig) -> int:
    """The width of the model's logits."""
    return config.get_text_config().vocab_size


def penalty_bytes(config: PretrainedConfig, rows: int) -> int:
    """The penalty state's bytes: float32 counts and a bool prompt mask, `[rows, V]` each."""
    return rows * vocab_size(config) * (4 + 1)


def kv_cache_bytes(config: PretrainedConfig, rows: int, length: int, dtype: torch.dtype) -> int:
    """A static cache's bytes: keys and values, 2 x layers x kv heads x head dim x rows x length x the
    dtype's size."""
    text = config.get_text_config()
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return 2 * text.num_hidden_layers * heads * head_dim * rows * length * dtype.itemsize


def record(logits: torch.Tensor, b: DecodeBuffers, shaping: Shaping, eos: torch.Tensor, pad: int):
    """Draw response token `b.t` of every row from `logits` (`[rows, V]`), store it and its log-prob
    (pad and 0 on ended rows), update the counts and end flags, and step `b.t`."""
    picked, logprob = draw(logits, b.draw, shaping, b.t, eos)
    picked = picked.masked_fill(b.ended, pad)
    count(b.draw, picked)
    column = b.t.view(1)
    b.tokens.index_copy_(1, column, picked[:, None])
    b.logprobs.index_copy_(1, column, logprob.masked_fill(b.ended, 0.0)[:, None])
    b.ended.logical_or_(torch.isin(picked, eos) | (b.limits <= b.t + 1))
    b.picked.copy_(picked)
    b.t.add_(1)


def decode_step(
    model: PreTrainedModel, b: DecodeBuffers, shaping: Shaping, eos: torch.Tensor, pad: int
) -> None:
    """Feed every row's last token (its cache column attended, its position + 1), then `record` the next."""
    b.mask.index_fill_(1, (b.width + b.t - 1).view(1), 1)
    b.position.add_(1)
    embeds = torch.empty((b.picked.shape[0], 1, 0), dtype=model.dtype, device=b.picked.device)
    attention = create_masks_for_generate(
        config=model.config,
        inputs_embeds=embeds,  # read for its batch size, length, dtype and device
        attention_mask=b.mask,
        position_ids=b.position,
        **{CACHE_ARGUMENT: b.cache},
    )
    out = model(
        input_ids=b.picked[:, None],
        attention_mask=attention,
        position_ids=b.position,
        past_key_values=b.cache,
        use_cache=True,
    )
    record(out.logits[:, -1], b, shaping, eos, pad)
