"""The `hf` engine's next-token draw: Gumbel-max over the tempered logits, cut to top-k and then top-p,
with counter-based noise, so a row's draw depends on its own seed, its response position and its
logits only (the penalties and the end-of-sequence block before `min_tokens` come before, in `draw`).

Row `i`'s noise for vocabulary entry `v` at response position `t` is a pure integer hash of
(`seeds[i]`, `t`, `v`): SplitMix64's output function applied twice, first to key the row's
position (`key = mix(seed + (t + 1) * GOLDEN)`), then to each entry (`mix(key + (v + 1) * GOLDEN)`),
in vectorised int64 tensor ops (multiplication wraps modulo 2^64, shifts are made logical by a
mask). Its top 23 bits give a uniform `u` in (0, 1) exactly representable in float32, and
`argmax(logits / T + gumbel(u))` over the kept tokens is an exact draw from their renormalised
softmax (the Gumbel-max trick), up to the 23-bit resolution of `u` (the draws of `torch.rand`
have 24). No generator state: batch composition, padding, row order and the decode loop leave a
row's draw unchanged, the host never synchronises, and `t` is a tensor (nothing in the step is a
Python number that changes per token).
"""

from __future__ import annotations

import torch

from srpo_dsl.backends.logprobs import scaled_logits

INT64 = 1 << 64


def _signed(value: int) -> int:
    """A 64-bit constant as the int64 with the same bits."""
    return value - INT64 if value >= 1 << 63 else value


GOLDEN = _signed(0x9E3779B97F4A7C15)  # SplitMix64's increment
MIX = (_signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB))  # its output function's multipliers
UNIFORM_BITS = 23  # float32 holds (k + 0.5) / 2^23 exactly for every 23-bit k


def _shifted(x: torch.Tensor, bits: int) -> torch.Tensor:
    """`x >> bits` as unsigned 64-bit (the arithmetic shift's copied sign bits masked off)."""
    return (x >> bits).bitwise_and_((1 << (64 - bits)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function on int64 tensors (wrapping multiplication), elementwise, in place
    (one scratch tensor of `x`'s size at a time)."""
    x.bitwise_xor_(_shifted(x, 30)).mul_(MIX[0])
    x.bitwise_xor_(_shifted(x, 27)).mul_(MIX[1])
    return x.bitwise_xor_(_shifted(x, 31))


def counter_uniform(seeds: torch.Tensor, position: torch.Tensor, vocab: int) -> torch.Tensor:
    """`[n, vocab]` float32 uniforms in (0, 1): entry (i, v) hashes (`seeds[i]`, `position`, v) only.

    `seeds`: `[n]` int64; `position`: an int64 tensor, one per row (`[n]`) or shared (`[]`)."""
    key = mix(seeds + (position + 1) * GOLDEN)
    entries = torch.arange(1, vocab + 1, dtype=torch.long, device=seeds.device) * GOLDEN
    bits = _shifted(mix(key[:, None] + entries), 64 - UNIFORM_BITS)
    return (bits.float() + 0.5) * 2.0**-UNIFORM_BITS


def sample_next(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    seeds: torch.Tensor,
    position: torch.Tensor,
    top_k: int = 0,
) -> torch.Tensor:
    """`[n]` next tokens: argmax at temperature 0, else drawn from `softmax(logits / T)` cut to the
    `top_k` most likely tokens (0: all) and then to top-p, row `i` with the noise of (`seeds[i]`,
    `position`) (`counter_uniform`)."""
    cut = top_p if top_p < 1.0 else None
    k = torch.tensor(top_k) if top_k > 0 else None
    return sample_scaled(scaled_logits(logits, temperature), temperature <= 0, cut, seeds, position, k)


def sample_scaled(
    scaled: torch.Tensor,
    greedy: bool,
    top_p: float | torch.Tensor | None,
    seeds: torch.Tensor,
    position: torch.Tensor,
    top_k: torch.Tensor | None = None,
) -> torch.Tensor:
    """`sample_next` on logits already divided by the temperature (`scaled_logits`); `top_p`: the nucleus
    cut (a number or a 0-dim tensor), None for none; `top_k`: a 0-dim long tensor, None for none.

    One chain of elementwise ops ending in an argmax: under torch.compile the noise is computed inside
    the reduction's kernel, and no `[n, V]` tensor of it (int64 or float) is ever stored."""
    if greedy:
        return scaled.argmax(-1)
    if top_p is not None or top_k is not None:
        scaled = scaled.masked_fill(scaled < cut_floor(scaled, top_k, top_p), float("-inf"))
    gumbel = -torch.log(-torch.log(counter_uniform(seeds, position, scaled.shape[-1])))
    return (scaled + gumbel).argmax(-1)


def cut_floor(
    scaled: torch.Tensor, top_k: torch.Tensor | None, top_p: float | torch.Tensor | None
) -> torch.Tensor:
    """`[n, 1]` the least tempered logit the cut keeps: the `top_k` largest (every token tied with the
    k-th too; k past the vocabulary keeps all), then the nucleus of their renormalised softmax
    (`nucleus_floor` over the k first ranked). One sort serves both."""
    ranked = scaled.sort(dim=-1, descending=True).values
    floor = ranked[:, -1:]
    if top_k is not None:  # the least of the k first ranked (a masked reduction, as the nucleus's)
        beyond = torch.arange(ranked.shape[-1], device=ranked.device) >= top_k.clamp(min=1)
        floor = ranked.masked_fill(beyond, float("inf")).amin(-1, keepdim=True)
        ranked = ranked.masked_fill(ranked < floor, float("-inf"))
    if top_p is not None:  # at least the k-th: rounding in the renormalised mass cannot widen the cut
        floor = torch.maximum(floor, ranked_nucleus_floor(ranked, top_p))
    return floor


def nucleus_floor(scaled: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """`[n, 1]` the least tempered logit the nucleus keeps: the smallest set of most likely tokens whose
    mass reaches `top_p` is every token at or above it (a tie with the least kept token stays; the most
    likely token always does).

    A threshold on the logits themselves, not a mask scattered back from the sorted order nor a
    comparison of probabilities computed twice: the same cut eagerly and compiled."""
    return ranked_nucleus_floor(scaled.sort(dim=-1, descending=True).values, top_p)


def ranked_nucleus_floor(ranked: torch.Tensor, top_p: float | torch.Tensor) -> torch.Tensor:
    """`nucleus_floor` of logits already sorted in descending order."""
    probs = torch.softmax(ranked, dim=-1)
    before = probs.cumsum(-1) - probs  # mass of the more likely tokens; 0 for the first, which stays
    return ranked.masked_fill(before >= top_p, float("inf")).amin(-1, keepdim=True)
