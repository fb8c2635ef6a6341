"""The log-prob math shared by the rollout backends, the trainer and the embedded model's warm-up.

A token's log-prob is that of the sampled token under `softmax(logits / temperature)` of the
raw model logits; temperature 0 (greedy) scores at temperature 1. Nucleus truncation
(`top_p`) is *not* folded in and top-k is off, so `token_logprobs` recomputes exactly what
`HFBackend.generate` reports. Rows are prompt + response, right-padded; position ids follow
the attention mask, so left- and right-padded layouts give the same values.

`response_logprobs` (the trainer's scoring) never holds the `[rows, T, V]` logits where the model's
head qualifies (`chunked_head`): each scoring runs the model for its last hidden states, gathers the
positions that predict response tokens, and applies the head a chunk of tokens at a time, each
chunk's logits recomputed in the backward pass. Elsewhere it scores the logits the model returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch.autograd.function import FunctionCtx

from srpo_dsl.backends.chunked_head import output_head, over_chunks
from srpo_dsl.backends.routing import routed

Scoring = Literal["cached", "uncached", "packed"]
SCORINGS: tuple[Scoring, ...] = ("cached", "uncached", "packed")  # how `response_logprobs` runs the model


@dataclass(frozen=True)
class TokenBatch:
    """Prompt + response rows, right-padded: `[B, L]` ids, attention mask and response mask."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor  # bool, True on response tokens only


def pack_sequences(prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int) -> TokenBatch:
    """Concatenate each prompt with its response and right-pad the batch."""
    rows = [p + r for p, r in zip(prompt_ids, response_ids, strict=True)]
    input_ids, attention_mask = pad_rows(rows, pad_id, max(map(len, rows)), left=False)
    starts = torch.tensor([len(p) for p in prompt_ids])
    response_mask = (torch.arange(input_ids.shape[1]) >= starts[:, None]) & attention_mask.bool()
    return TokenBatch(input_ids, attention_mask, response_mask)


def pad_rows(
    rows: list[list[int]], pad_id: int, width: int, *, left: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """`[n, width]` ids and attention mask of `rows`, padded on the left or on the right."""
    fill = [[pad_id] * (width - len(row)) for row in rows]
    ids = torch.tensor([f + row if left else row + f for row, f in zip(rows, fill)], dtype=torch.long)
    lengths = torch.tensor([len(row) for row in rows])
    columns = torch.arange(width)
    mask = columns >= width - lengths[:, None] if left else columns < lengths[:, None]
    return ids, mask.long()


def scaled_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """`logits / T` in float32; T = 0 (greedy) scores at T = 1."""
    return logits.float() / (temperature if temperature > 0 else 1.0)


def picked_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """`[..., n]` log-probs of `targets` under `softmax(logits / T)`; `logits` is `[..., n, V]`.

    Float32 math over chunks of rows (`PickedLogprobs`): neither pass holds a float32 copy of all
    the logits, which at a 150k vocabulary would be several times the model's own memory."""
    return PickedLogprobs.apply(logits, targets, temperature)


class PickedLogprobs(torch.autograd.Function):
    """log_softmax(logits / T) at `targets`, and its gradient (onehot - softmax) / T, a chunk of rows
    at a time in float32; only the logits themselves are kept for the backward pass."""

    CHUNK_BYTES = 2**28  # float32 scratch per chunk of rows

    @staticmethod
    def forward(
        ctx: FunctionCtx, logits: torch.Tensor, targets: torch.Tensor, temperature: float
    ) -> torch.Tensor:
        ctx.save_for_backward(logits, targets)
        ctx.temperature = temperature
        flat, picks = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1, 1)
        out = torch.empty(picks.shape[0], dtype=torch.float32, device=logits.device)
        for rows in PickedLogprobs.chunks(flat):
            scaled = scaled_logits(flat[rows], temperature)
            out[rows] = scaled.gather(-1, picks[rows]).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
        return out.view(targets.shape)

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        logits, targets = ctx.saved_tensors
        flat, picks = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1, 1)
        per_row = grad.reshape(-1, 1).float() / (ctx.temperature if ctx.temperature > 0 else 1.0)
        out = torch.empty_like(flat)
        for rows in PickedLogprobs.chunks(flat):
            d_scaled = -torch.softmax(scaled_logits(flat[rows], ctx.temperature), dim=-1)
            d_scaled.scatter_add_(-1, picks[rows], torch.ones_like(picks[rows], dtype=d_scaled.dtype))
            out[rows] = (d_scaled * per_row[rows]).to(out.dtype)
        return out.view(logits.shape), None, None

    @staticmethod
    def chunks(flat: torch.Tensor) -> list[slice]:
        step = max(1, PickedLogprobs.CHUNK_BYTES // (4 * flat.shape[-1]))
        return [slice(start, start + step) for start in range(0, flat.shape[0], step)]


def entropies(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """`[..., n]` entropies of `softmax(logits / T)`: H = log Z - E_p[logit / T]."""
    scaled = scaled_logits(logits, temperature)
    return torch.logsumexp(scaled, dim=-1) - (scaled.softmax(-1) * scaled).sum(-1)


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`[B, L]` log-probs of each token given its prefix, 0.0 where `response_mask` is off.

    One forward pass; differentiable when called under grad. With `with_entropy`, also the
    `[B, L]` entropy of the distribution each token was drawn from.
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    mask = response_mask.bool()
    following = F.pad(input_ids[:, 1:], (0, 1))  # position i predicts token i + 1 (the last: nothing)
    picked = F.pad(picked_logprobs(logits, following, temperature)[:, :-1], (1, 0))  # no sliced copy
    logprobs = torch.where(mask, picked, 0.0)
    if not with_entropy:
        return logprobs
    entropy = F.pad(entropies(logits, temperature)[:, :-1], (1, 0))
    return logprobs, torch.where(mask, entropy, 0.0)


def sequence_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    temperature: float = 1.0,
) -> list[torch.Tensor]:
    """Per-row log-probs of the given response tokens, from one batched forward pass."""
    batch = pack_sequences(prompt_ids, response_ids, pad_id=0)  # padding is masked out: any id works
    device = next(model.parameters()).device
    lp = token_logprobs(
        model,
        batch.input_ids.to(device),
        batch.attention_mask.to(device),
        batch.response_mask.to(device),
        temperature,
    )
    return [lp[row, batch.response_mask[row].to(device)] for row in range(lp.shape[0])]


def distinct_rows(rows: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct rows in first-seen order, and each row's index among them."""
    distinct = list(dict.fromkeys(map(tuple, rows)))
    slot = {row: k for k, row in enumerate(distinct)}
    return [list(row) for row in distinct], [slot[tuple(row)] for row in rows]


def mask_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count only attended tokens (padding anywhere leaves them unchanged)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def response_logprobs(
    model: torch.nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_id: int,
    temperature: float,
    device: torch.device,
    with_entropy: bool = False,
    adapters: list[str] | None = None,
    scoring: Scoring = "cached",
    follows: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`[n, R]` log-probs (and entropies) of the response tokens, response-aligned, 0.0 past each row's end,
    differentiable. `adapters`: each row's peft adapter, for a model hosting several. `scoring`
    (`SCORINGS`): `cached` (`cached_logprobs`: each distinct prompt once, the responses on its KV cache),
    `uncached` (`uncached_logprobs`: one padded pass over every row), `packed` (`packed_logprobs`: rows
    without padding between them, a conversation's rows linked by `follows` in one pass over its last;
    the other scorings run every row alone). Each applies the model's head to the response positions a
    chunk of tokens at a time where the head qualifies (`chunked_head`), so neither the forward nor the
    backward holds `[n, T, V]` logits; the values and gradients are those of the whole logits."""
    if scoring == "packed":
        return packed_logprobs(
            model, prompts, responses, temperature, device, with_entropy, adapters, follows
        )
    scored = cached_logprobs if scoring != "uncached" else uncached_logprobs
    return scored(model, prompts, responses, pad_id, temperature, device, with_entropy, adapters)


def padded_pair(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompt ids and mask, left-padded (every prompt ends in the last column), then response ids and
    mask, right-padded (at least one column), on `device`."""
    prompt = pad_rows(prompts, pad_id, max(map(len, prompts)), left=True)
    response = pad_rows(responses, pad_id, max(1, *map(len, responses)), left=False)
    return tuple(t.to(device) for t in (*prompt, *response))  # type: ignore[return-value]


def cached_logprobs(
    model: torch.nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_id: int,
    temperature: float,
    device: torch.device,
    with_entropy: bool = False,
    adapters: list[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`response_logprobs` in two forward passes: each distinct prompt once (left-padded), then every
    response on top of its prompt's KV cache. A group of G rollouts of one prompt computes that prompt
    once instead of G times; the pass count is fixed (two) whatever the duplication, so ranks stay in
    step under ZeRO-3. With `adapters` a prompt is computed once per adapter that reads it."""
    keyed = prompts if adapters is None else [[*p, a] for p, a in zip(prompts, adapters)]
    distinct_keys, index = distinct_rows(keyed)
    distinct = distinct_keys if adapters is None else [k[:-1] for k in distinct_keys]
    names = (None, None) if adapters is None else ([k[-1] for k in distinct_keys], adapters)
    rows = torch.tensor(index, device=device)
    prompt_ids, prompt_mask, resp_ids, resp_mask = padded_pair(distinct, responses, pad_id, device)
    with output_head(model) as head:
        with routed(names[0]):
            first = model(
                input_ids=prompt_ids,
                attention_mask=prompt_mask,
                position_ids=mask_positions(prompt_mask),
                use_cache=True,
                logits_to_keep=1,
            )
        cache = first.past_key_values
        cache.batch_select_indices(rows)  # one cache row per response
        mask = torch.cat([prompt_mask[rows], resp_mask], dim=1)
        with routed(names[1]):
            rest = model(
                input_ids=resp_ids,
                attention_mask=mask,
                position_ids=mask_positions(mask)[:, prompt_ids.shape[1] :],
                past_key_values=cache,
                use_cache=True,
            )
    return response_scores(
        head, first.logits[rows, -1], rest.logits, resp_ids, resp_mask, temperature, with_entropy
    )


def pack_into(lengths: list[int], width: int) -> list[list[int]]:
    """Row indices per packed sequence of at most `width` tokens (a longer row alone): first fit, longest
    rows first; rows keep their order within a sequence."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        b = next((b for b, free in enumerate(room) if lengths[i] <= free), None)
        if b is None:
            bins.append([])
            room.append(max(width, lengths[i]))
            b = len(bins) - 1
        bins[b].append(i)
        room[b] -= lengths[i]
    return [sorted(b) for b in bins]


def packed_logprobs(
    model: torch.nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    temperature: float,
    device: torch.device,
    with_entropy: bool = False,
    adapters: list[str] | None = None,
    follows: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`response_logprobs` without padding between rows: segments (a row's prompt then response) one after
    another in sequences as long as the longest segment, position ids restarting at each segment, so
    transformers keeps attention within a segment (a block-causal mask; flash attention's variable-length
    kernel where it is installed); only each sequence's tail is padded. A sequence no longer than the
    longest segment keeps the attention no costlier than the padded layout's where the mask is
    materialised (SDPA, eager). `follows` (row i continues row `follows[i]`, -1: none; `chain_tails`)
    chains rows into one segment, the chain's last row: each row reads its response at its prompt's
    length into it, exact under causal attention (a position sees only the tokens up to it, its row's
    own). `adapters`: each row's; each adapter's segments get sequences of their own, run under
    `routed`. Scattered back to `[n, R]`."""
    rows = [p + r for p, r in zip(prompts, responses, strict=True)]
    tails = chain_tails(follows if follows is not None else [-1] * len(rows))
    check_chains(rows, tails, adapters)
    segments = list(dict.fromkeys(tails))  # each chain's last row: the tokens the model runs over
    lengths = [len(rows[t]) for t in segments]
    bins, routes = bin_segments(lengths, None if adapters is None else [adapters[t] for t in segments])
    ids, positions, starts = packed_layout([rows[t] for t in segments], bins)
    segment_of = {t: k for k, t in enumerate(segments)}
    offset = starts[torch.tensor([segment_of[t] for t in tails], dtype=torch.long)]  # where each row starts
    answered = torch.tensor([len(r) for r in responses])
    row_of = torch.repeat_interleave(torch.arange(len(rows)), answered)  # each response token's row ...
    column = torch.arange(len(row_of)) - torch.repeat_interleave(answered.cumsum(0) - answered, answered)
    prompt_lengths = torch.tensor([len(p) for p in prompts])
    predicting = (offset + prompt_lengths - 1)[row_of] + column  # ... and the flat position predicting it
    targets = torch.tensor([token for r in responses for token in r], device=device)
    with routed(routes), output_head(model) as head:
        out = model(input_ids=ids.to(device), position_ids=positions.to(device), use_cache=False).logits
    scores = token_scores(head, out.flatten(0, 1)[predicting.to(device)], targets, temperature, with_entropy)
    shape, at = (len(rows), max(1, *answered.tolist())), (row_of.to(device), column.to(device))
    return scattered(shape, at, scores[0]), scattered(shape, at, scores[1])


def chain_tails(follows: list[int]) -> list[int]:
    """Each row's chain tail: rows linked by `follows` (row i continues row `follows[i]`; -1: none) form a
    chain, whose tail is the row no other row continues. A row continued twice, or a cycle, is an error."""
    after = [-1] * len(follows)
    for i, r in enumerate(follows):
        if r < -1 or r >= len(follows) or (r >= 0 and after[r] >= 0):
            raise ValueError(f"follows: row {i} cannot continue row {r}")
        if r >= 0:
            after[r] = i
    tails = [-1] * len(follows)
    for tail in (i for i, a in enumerate(after) if a < 0):
        row = tail
        while row >= 0:
            tails[row] = tail
            row = follows[row]
    if -1 in tails:
        raise ValueError("follows: rows continue each other in a cycle")
    return tails


def check_chains(rows: list[list[int]], tails: list[int], adapters: list[str] | None) -> None:
    """Each row (prompt + response ids) must begin its chain's tail, and go through its tail's adapter."""
    for i, tail in enumerate(tails):
        if rows[tail][: len(rows[i])] != rows[i]:
            raise ValueError(f"follows: row {i} is not the start of row {tail}, the last of its chain")
        if adapters is not None and adapters[i] != adapters[tail]:
            raise ValueError(f"follows: rows {i} and {tail} of one chain go through different adapters")


def bin_segments(lengths: list[int], names: list[str] | None) -> tuple[list[list[int]], list[str] | None]:
    """Segment indices per packed sequence as long as the longest segment (`pack_into`); with `names` (each
    segment's adapter), each adapter's segments in sequences of their own, adapters in first-seen order,
    and each sequence's adapter."""
    width = max(lengths)
    if names is None:
        return pack_into(lengths, width), None
    bins, routes = [], []
    for name in dict.fromkeys(names):
        mine = [k for k, n in enumerate(names) if n == name]
        for members in pack_into([lengths[k] for k in mine], width):
            bins.append([mine[j] for j in members])
            routes.append(name)
    return bins, routes


def packed_layout(
    segments: list[list[int]], bins: list[list[int]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`[S, W]` ids and position ids of `segments` packed by `bins` (one after another, positions restarting
    at each; W: the fullest sequence, the others' tails padded), and each segment's start in the
    flattened `[S * W]` layout."""
    width = max(sum(len(segments[i]) for i in b) for b in bins)
    ids = torch.zeros(len(bins), width, dtype=torch.long)
    positions = torch.zeros(len(bins), width, dtype=torch.long)
    offset = torch.zeros(len(segments), dtype=torch.long)  # counting along the flat sequences
    for b, members in enumerate(bins):
        lengths = [len(segments[i]) for i in members]
        ends = torch.tensor(lengths).cumsum(0)
        ids[b, : int(ends[-1])] = torch.tensor([token for i in members for token in segments[i]])
        starts = torch.cat([torch.zeros(1, dtype=torch.long), ends])  # the tail: a segment never read
        spans = torch.tensor([*lengths, width - int(ends[-1])])
        positions[b] = torch.arange(width) - starts.repeat_interleave(spans)  # restarting at each segment
        offset[members] = b * width + ends - torch.tensor(lengths)
    return ids, positions, offset


def uncached_logprobs(
    model: torch.nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_id: int,
    temperature: float,
    device: torch.device,
    with_entropy: bool = False,
    adapters: list[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`response_logprobs` in one forward pass without a KV cache (gradient checkpointing turns the cache
    off inside each layer): every row's left-padded prompt then right-padded response, the layout and
    positions of the cached passes, the logits kept for the last prompt position and the response only."""
    prompt_ids, prompt_mask, resp_ids, resp_mask = padded_pair(prompts, responses, pad_id, device)
    mask = torch.cat([prompt_mask, resp_mask], dim=1)
    with routed(adapters), output_head(model) as head:
        out = model(
            input_ids=torch.cat([prompt_ids, resp_ids], dim=1),
            attention_mask=mask,
            position_ids=mask_positions(mask),
            use_cache=False,
            logits_to_keep=resp_ids.shape[1] + 1,
        ).logits
    return response_scores(head, out[:, 0], out[:, 1:], resp_ids, resp_mask, temperature, with_entropy)


def response_scores(
    head: torch.nn.Linear | None,
    first: torch.Tensor,
    rest: torch.Tensor,
    responses: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`[n, R]` log-probs (and entropies) of `responses` whose first token is drawn from `first` (`[n, *]`,
    the prompt's last position) and token j + 1 from `rest[:, j]` (`[n, R, *]`); 0.0 off `mask`. With
    `head` (`chunked_head.output_head`) they are hidden states: the states predicting the response tokens
    are gathered and scored by `token_scores`, a chunk of tokens at a time. Without, they are logits,
    each part scored where the model wrote it: no concatenated copy of the vocabulary-wide logits (nor of
    their gradient), which at a 150k vocabulary outweighs the model's activations."""
    kept = mask.bool()
    if head is not None:
        states = torch.cat([first[:, None], rest[:, :-1]], dim=1)[kept]  # [N, H]
        scores = token_scores(head, states, responses[kept], temperature, with_entropy)
        at = kept.nonzero(as_tuple=True)  # the order of `[kept]`
        return scattered(kept.shape, at, scores[0]), scattered(kept.shape, at, scores[1])
    following = F.pad(responses[:, 1:], (0, 1))  # the last `rest` position predicts nothing
    joined = lambda a, b: torch.cat([a[:, None], b[:, :-1]], dim=1)  # noqa: E731
    logprobs = joined(
        picked_logprobs(first, responses[:, 0], temperature), picked_logprobs(rest, following, temperature)
    )
    logprobs = torch.where(kept, logprobs, 0.0)
    if not with_entropy:
        return logprobs, None
    entropy = joined(entropies(first, temperature), entropies(rest, temperature))
    return logprobs, torch.where(kept, entropy, 0.0)


def token_scores(
    head: torch.nn.Linear | None,
    states: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`[N]` log-probs of `targets` (and entropies) at `states`: `[N, V]` logits when `head` is None, else
    `[N, H]` hidden states that `head` turns into logits a chunk of tokens at a time
    (`chunked_head.over_chunks`, `PickedLogprobs.CHUNK_BYTES` of float32 logits per chunk)."""

    def score(logits: torch.Tensor, picks: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logprobs = picked_logprobs(logits, picks, temperature)
        return (logprobs, entropies(logits, temperature)) if with_entropy else (logprobs,)

    if head is None:
        scores = score(states, targets)
    else:
        scores = over_chunks(head, states, score, targets, budget=PickedLogprobs.CHUNK_BYTES)
    return scores[0], scores[1] if with_entropy else None


def scattered(
    shape: torch.Size | tuple[int, int], at: tuple[torch.Tensor, ...], values: torch.Tensor | None
) -> torch.Tensor | None:
    """`values` placed `at` (row, column) in zeros of `shape` (differentiable); None stays None."""
    if values is None:
        return None
    return torch.zeros(shape, device=values.device, dtype=values.dtype).index_put(at, values)
