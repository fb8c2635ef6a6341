"""A conversation's KV cache kept between its turns by the `hf` engine's `dynamic` decode loop.

A conversation agent's next prompt begins with its previous prompt and the reply it sampled
(`runtime.conversations`); the request says how many ids that is (`GenRequest.prefix`). When a kept
row ends, the KV of every id it fed (its prompt and its reply but the last token, which was sampled
and never fed) is stored under those ids (and its adapter). The next turn finds it by its first
`prefix - 1` ids, and only the rest of its prompt is prefilled: the cache rows of the batch are the
kept ones, left-padded to the longest, then the new ids, left-padded too (the attention mask covers
the padding in the middle; positions count attended ids only, so they are the ids' own).

Entries live until the engine releases its memory before an update (`Decoder.release`): the weights
change there, and with them every kept KV. Each entry is taken by the one turn that continues it, so
at most one per conversation is held. Models whose cache has sliding-window layers (which keep only
their window) are not kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, DynamicCache

Entry = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values [kv_heads, fed ids, head_dim]


class TurnCache:
    """Kept KV, by (fed ids, adapter)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[tuple[int, ...], str | None], Entry] = {}

    def clear(self) -> None:
        self.entries.clear()

    def take(self, prompt: Sequence[int], prefix: int, adapter: str | None) -> Entry | None:
        """The kept KV of the turn whose prompt and reply begin `prompt` (`prefix` ids; None: none kept)."""
        if prefix < 2:
            return None
        return self.entries.pop((tuple(prompt[: prefix - 1]), adapter), None)

    def keep(
        self, fed: Sequence[int], cache: Cache, row: int, mask: torch.Tensor, adapter: str | None
    ) -> None:
        """Store row `row` of `cache`: the first `len(fed)` of its attended positions (`mask`, its attention
        mask row) are `fed` (a reply cut at a stop string leaves out the tokens fed after it)."""
        keep = mask.bool()
        n = len(fed)
        entry = [(lay.keys[row][:, keep][:, :n], lay.values[row][:, keep][:, :n]) for lay in cache.layers]
        if entry and entry[0][0].shape[1] == n:
            self.entries[(tuple(fed), adapter)] = entry


def keeps_turns(cache: Cache) -> bool:
    """Whether every layer of `cache` keeps all its positions (no sliding window)."""
    return all(not getattr(layer, "is_sliding", False) for layer in cache.layers)


def seeded_cache(
    config: object, kept: list[Entry | None], pad: int, suffixes: list[list[int]], device: torch.device
) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
    """A cache holding each row's kept KV (left-padded to the longest; rows without any: all padding), the
    rows' new ids left-padded, and the attention mask over both."""
    lengths = [0 if k is None else k[0][0].shape[1] for k in kept]
    width = max(lengths)
    first = next(k for k in kept if k is not None)
    layers = []
    for layer, (keys, values) in enumerate(first):
        shape = (len(kept), keys.shape[0], width, keys.shape[2])
        k_all, v_all = keys.new_zeros(shape), values.new_zeros(shape)
        for row, entry in enumerate(kept):
            if entry is not None:
                k_all[row, :, width - lengths[row] :] = entry[layer][0]
                v_all[row, :, width - lengths[row] :] = entry[layer][1]
        layers.append((k_all, v_all))
    held = torch.arange(width, device=device)[None] >= width - torch.tensor(lengths, device=device)[:, None]
    new = max(map(len, suffixes))
    ids = torch.tensor([[pad] * (new - len(s)) + s for s in suffixes], device=device)
    fresh = (
        torch.arange(new, device=device)[None]
        >= new - torch.tensor([len(s) for s in suffixes], device=device)[:, None]
    )
    return DynamicCache(layers, config=config), ids, torch.cat([held, fresh], dim=1).long()
