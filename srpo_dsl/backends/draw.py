"""One decode step's draw in the `hf` engine, shared by its decode loops: the sampling controls applied to
the raw logits, the draw, and the behaviour log-prob.

The order, every loop: the penalties on the raw logits (`penalized`: repetition, then frequency and
presence), the end-of-sequence block of rows short of their `min_tokens` (`eos_blocked`), the
temperature, top-k, top-p, the Gumbel-max draw (`sampling.sample_scaled`). The log-prob recorded for
the drawn token is that of `softmax(raw logits / T)`, none of the controls folded in: what the trainer
recomputes (`logprobs`), so an on-policy importance ratio is exactly 1 (docs/objective.md).

The controls' values are tensors (`DrawState`), so a compiled step serves every value; which controls
apply at all is `Shaping`, a compiled step's flags (one graph per combination). Penalties need each
row's counts of its response tokens and the set of its prompt's tokens (`[rows, V]` each), held only
when a penalty applies.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

import torch

from srpo_dsl.backends.base import PENALTIES_OFF
from srpo_dsl.backends.sampling import sample_scaled


class Shaping(NamedTuple):
    """Which controls a chunk's draw applies (a compiled step's flags)."""

    greedy: bool = False  # temperature 0: the argmax of the penalised logits
    nucleus: bool = False  # top_p < 1
    top_k: bool = False  # top_k > 0
    penalized: bool = False  # a penalty other than its neutral value
    min_tokens: bool = False  # some row's min_tokens > 0

    @classmethod
    def of(cls, temperature: float, top_p: float, top_k: int, penalties: tuple[float, ...], least: int):
        """The flags of a chunk's settings (`least`: its rows' largest min_tokens)."""
        return cls(temperature <= 0, top_p < 1.0, top_k > 0, tuple(penalties) != PENALTIES_OFF, least > 0)


@dataclass
class DrawState:
    """A chunk's draw settings and the rows' penalty state, as tensors on the model's device."""

    seeds: torch.Tensor  # [rows] long
    min_tokens: torch.Tensor  # [rows] long
    divisor: torch.Tensor  # [] float32: the temperature (1 when greedy)
    top_p: torch.Tensor  # [] float32
    top_k: torch.Tensor  # [] long
    penalties: torch.Tensor  # [3] float32: frequency, presence, repetition
    counts: torch.Tensor | None = None  # [rows, V] float32: each token's count in the response so far
    prompt_seen: torch.Tensor | None = None  # [rows, V] bool: the tokens of the row's prompt

    @classmethod
    def empty(cls, rows: int, vocab: int, penalized: bool, device: torch.device) -> DrawState:
        """Zeroed state for `rows` rows (penalty state only when `penalized`)."""
        long = {"dtype": torch.long, "device": device}
        matrix = lambda dtype: torch.zeros(rows, vocab, dtype=dtype, device=device)  # noqa: E731
        return cls(
            torch.zeros(rows, **long),
            torch.zeros(rows, **long),
            torch.ones((), device=device),
            torch.ones((), device=device),
            torch.zeros((), **long),
            torch.zeros(3, device=device),
            matrix(torch.float32) if penalized else None,
            matrix(torch.bool) if penalized else None,
        )

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in (getattr(self, f.name) for f in fields(self)) if t is not None]

    def select(self, rows: torch.Tensor) -> DrawState:
        """The state of rows `rows` only (the `dynamic` loop's rows that go on)."""
        pick = lambda t: None if t is None else t[rows]  # noqa: E731
        return DrawState(
            self.seeds[rows],
            self.min_tokens[rows],
            self.divisor,
            self.top_p,
            self.top_k,
            self.penalties,
            pick(self.counts),
            pick(self.prompt_seen),
        )


def prompt_presence(seen: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Fill `seen` (`[n, V]` bool) with the tokens of each row's prompt: `ids` `[n, L]` where `mask` is 1
    (padding, even with a token id that also occurs in a prompt, is not seen)."""
    hits = torch.zeros(seen.shape, dtype=torch.float32, device=seen.device)
    hits.scatter_add_(1, ids, mask.float())
    return seen.copy_(hits > 0)


def penalized(logits: torch.Tensor, s: DrawState) -> torch.Tensor:
    """`logits` (raw, float32) with the penalties: a token seen in the prompt or the response so far has a
    positive logit divided by the repetition penalty and a negative one multiplied by it; then
    `- frequency * count - presence * (count > 0)` over the response's tokens."""
    assert s.counts is not None and s.prompt_seen is not None
    frequency, presence, repetition = s.penalties.unbind()
    present = s.counts > 0
    seen = s.prompt_seen | present
    repeated = torch.where(logits > 0, logits / repetition, logits * repetition)
    logits = torch.where(seen, repeated, logits)
    return logits - frequency * s.counts - presence * present.float()


def eos_blocked(logits: torch.Tensor, eos: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
    """`logits` with the end-of-sequence ids (`eos`) at -inf on the `blocked` rows (`[n]` bool)."""
    ends = logits.index_select(-1, eos).masked_fill(blocked[:, None], float("-inf"))
    return logits.index_copy(-1, eos, ends)


def draw(
    logits: torch.Tensor, s: DrawState, shaping: Shaping, t: torch.Tensor, eos: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`[n]` tokens drawn at response position `t` (a tensor) and their log-probs under
    `softmax(logits / T)` (see the module's docstring)."""
    raw = logits.float()
    scaled = raw / s.divisor
    shaped = raw
    if shaping.penalized:
        shaped = penalized(shaped, s)
    if shaping.min_tokens:
        shaped = eos_blocked(shaped, eos, t < s.min_tokens)
    shaped = scaled if shaped is raw else shaped / s.divisor
    top_p = s.top_p if shaping.nucleus else None
    picked = sample_scaled(shaped, shaping.greedy, top_p, s.seeds, t, s.top_k if shaping.top_k else None)
    logprob = scaled.gather(-1, picked[:, None]).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    return picked, logprob


def count(s: DrawState, picked: torch.Tensor) -> None:
    """Add the drawn tokens to the rows' counts (when penalties are held)."""
    if s.counts is not None:
        s.counts.scatter_add_(1, picked[:, None], torch.ones_like(picked[:, None], dtype=torch.float32))
