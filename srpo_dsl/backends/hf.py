"""In-process generation with transformers.

Each response token carries its log-prob as defined in `srpo_dsl.backends.logprobs` (the
module the trainer scores with, so recomputed and reported values agree). A response ends
with its end-of-sequence token when it stopped (`finish_reason == "stop"`); that token is
part of the action and carries a log-prob.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from srpo_dsl.backends.base import BackendError, GenRequest, GenResult
from srpo_dsl.backends.logprobs import (
    TokenBatch,
    distinct_rows,
    mask_positions,
    pack_sequences,
    pad_rows,
    picked_logprobs,
    scaled_logits,
    sequence_logprobs,
    token_logprobs,
)
from srpo_dsl.backends.routing import routed
from srpo_dsl.lang.graph import BASE_ADAPTER

# the log-prob helpers stay importable from here for callers written before `logprobs` existed
__all__ = [
    "HFBackend",
    "TokenBatch",
    "encode_prompts",
    "pack_sequences",
    "sequence_logprobs",
    "token_logprobs",
]


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], use_chat_template: bool
) -> list[list[int]]:
    """Prompt token ids: a one-turn user chat with the generation prompt, or raw text after BOS."""
    if use_chat_template:
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
        return tokenizer(texts, add_special_tokens=False)["input_ids"]
    ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    bos = tokenizer.bos_token_id
    return [[bos, *row] for row in ids] if bos is not None else ids


def _resolve_dtype(dtype: torch.dtype | str | None, device: str) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


class HFBackend:
    """Generation with a transformers causal LM, loaded from a path/repo id or shared in memory."""

    name = "hf"
    merged_weights = False

    def __init__(
        self,
        model_or_path: str | Path | PreTrainedModel,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        device: str = "cpu",
        dtype: torch.dtype | str | None = None,
        use_chat_template: bool | None = None,
        max_batch_size: int = 256,
    ):
        if isinstance(model_or_path, (str, Path)):
            try:
                tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(model_or_path))
                model = AutoModelForCausalLM.from_pretrained(
                    str(model_or_path), dtype=_resolve_dtype(dtype, device)
                )
            except (OSError, ValueError) as exc:
                reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                raise BackendError(f"cannot load model `{model_or_path}`: {reason}") from None
            model.to(device)
        else:
            if tokenizer is None:
                raise BackendError("an in-memory model needs its tokenizer: HFBackend(model, tokenizer=...)")
            model = model_or_path
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.use_chat_template = (
            bool(tokenizer.chat_template) if use_chat_template is None else use_chat_template
        )
        self.max_batch_size = max_batch_size
        eos = model.generation_config.eos_token_id
        self.eos_ids = {tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None or not self.eos_ids:
            raise BackendError(
                "the tokenizer needs an end-of-sequence token (and a pad token, or EOS as pad)"
            )
        self.pad_id: int = pad
        self.version = 0
        self.awake = True
        self.hosts_adapters = hasattr(model, "peft_config")  # a PeftModel: requests may name an adapter

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]] | None = None) -> int:
        """After an optimizer step: copy (name, tensor) pairs into the module's parameters (none when
        the module is the trained one itself); version + 1."""
        if weights is not None:
            params = dict(self.model.named_parameters())
            with torch.no_grad():
                for name, tensor in weights:
                    params[name].copy_(tensor)
        self.version += 1
        return self.version

    def sleep(self) -> None:
        """Before the update: the KV cache is freed after every call, so only the allocator's cached
        blocks are handed back (CUDA)."""
        self.awake = False
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        self.awake = True

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        """One batched decode per chunk of requests with equal (temperature, top_p)."""
        if not requests:
            return []
        if not self.awake:
            raise BackendError("the hf engine is asleep (between sleep() and wake_up()): it cannot generate")
        prompt_ids = encode_prompts(self.tokenizer, [r.prompt for r in requests], self.use_chat_template)
        groups: dict[tuple[float, float], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.temperature, r.top_p), []).append(i)
        results: list[GenResult | None] = [None] * len(requests)
        devices = [self.device] if self.device.type == "cuda" else []
        was_training = self.model.training
        self.model.eval()
        try:
            with (
                torch.random.fork_rng(devices=devices) if seed is not None else nullcontext(),
                torch.no_grad(),
            ):
                if seed is not None:
                    torch.manual_seed(seed)
                for (temperature, top_p), members in groups.items():
                    # less padding per chunk; each adapter's rows together (LoRA runs over row blocks)
                    members.sort(key=lambda i: (requests[i].adapter or "", len(prompt_ids[i])))
                    for start in range(0, len(members), self.max_batch_size):
                        chunk = members[start : start + self.max_batch_size]
                        outs = self._generate_chunk(
                            [prompt_ids[i] for i in chunk],
                            [requests[i].max_tokens for i in chunk],
                            temperature,
                            top_p,
                            self._routing([requests[i] for i in chunk]),
                        )
                        for i, out in zip(chunk, outs):
                            results[i] = out
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _routing(self, chunk: list[GenRequest]) -> list[str | None] | None:
        """Each request's adapter when some name one (a base hosting adapters); None: the model as it is
        (a policy's own `lora(...)` is its active adapter)."""
        if not self.hosts_adapters or all(r.adapter is None for r in chunk):
            return None
        return [r.adapter for r in chunk]

    def _generate_chunk(
        self,
        prompts: list[list[int]],
        max_tokens: list[int],
        temperature: float,
        top_p: float,
        adapters: list[str | None] | None = None,
    ) -> list[GenResult]:
        """Prefill each distinct prompt once, then decode every request; a row leaves the batch
        (and its cache) as soon as it emits end-of-sequence or reaches its own `max_tokens`.

        `adapters`: each row's LoRA adapter (one batch may mix them); a prompt is prefilled
        once per adapter that reads it."""
        keyed = prompts if adapters is None else [[*p, a] for p, a in zip(prompts, adapters)]
        distinct, index = distinct_rows(keyed)
        first = {k: i for i, k in reversed(list(enumerate(index)))}
        heads = [first[k] for k in range(len(distinct))]  # a request of each distinct (prompt, adapter)
        names = None if adapters is None else [a or BASE_ADAPTER for a in adapters]
        logits, cache, mask = self._prefill(
            [prompts[i] for i in heads], None if names is None else [names[i] for i in heads]
        )
        rows = torch.tensor(index, device=self.device)
        cache.batch_select_indices(rows)  # one cache row per request (prompts repeat within groups)
        logits, mask = logits[rows], mask[rows]
        limits = torch.tensor(max_tokens, device=self.device)
        eos = torch.tensor(sorted(self.eos_ids), device=self.device)
        tokens = torch.full((len(prompts), max(max_tokens)), self.pad_id, device=self.device)
        logprobs = torch.zeros(tokens.shape, device=self.device)
        active = torch.arange(len(prompts), device=self.device)
        for step in range(tokens.shape[1]):
            picked = sample_next(logits, temperature, top_p)
            tokens[active, step] = picked
            logprobs[active, step] = picked_logprobs(logits, picked, temperature)
            going = ~torch.isin(picked, eos) & (limits[active] > step + 1)
            if not going.any():
                break
            if not going.all():
                kept = going.nonzero().squeeze(-1)
                active, picked, mask = active[kept], picked[kept], mask[kept]
                cache.batch_select_indices(kept)
                names = None if names is None else [names[k] for k in kept.tolist()]
            mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
            logits = self._next_logits(picked[:, None], mask, cache, names)
        return self._results(prompts, tokens.tolist(), logprobs.tolist(), max_tokens)

    def _prefill(
        self, prompts: list[list[int]], adapters: list[str] | None = None
    ) -> tuple[torch.Tensor, Cache, torch.Tensor]:
        """Left-padded forward over `prompts`: the last position's logits, the KV cache, the mask."""
        input_ids, mask = pad_rows(prompts, self.pad_id, max(map(len, prompts)), left=True)
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        cache = DynamicCache(config=self.model.config)
        return self._next_logits(input_ids, mask, cache, adapters), cache, mask

    def _next_logits(
        self, input_ids: torch.Tensor, mask: torch.Tensor, cache: Cache, adapters: list[str] | None = None
    ) -> torch.Tensor:
        """`[n, V]` logits after the last of `input_ids`, extending `cache` (positions follow `mask`);
        row i through LoRA adapter `adapters[i]` when the model hosts several."""
        positions = mask_positions(mask)[:, -input_ids.shape[1] :]
        with routed(adapters):
            out = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
        return out.logits[:, -1]

    def _results(
        self,
        prompts: list[list[int]],
        tokens: list[list[int]],
        logprobs: list[list[float]],
        limits: list[int],
    ) -> list[GenResult]:
        """Each row up to its first end-of-sequence token (kept: part of the action), or its limit."""
        kept, finishes = [], []
        for ids, limit in zip(tokens, limits):
            end = next((k for k, t in enumerate(ids[:limit]) if t in self.eos_ids), None)
            kept.append(limit if end is None else end + 1)
            finishes.append("length" if end is None else "stop")
        texts = self.tokenizer.batch_decode(
            [ids[: n - (f == "stop")] for ids, n, f in zip(tokens, kept, finishes)], skip_special_tokens=True
        )
        return [
            GenResult(p, ids[:n], lps[:n], text, f)
            for p, ids, lps, n, text, f in zip(prompts, tokens, logprobs, kept, texts, finishes)
        ]


def sample_next(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """`[n]` next tokens: argmax at temperature 0, else drawn from `softmax(logits / T)` cut to top-p."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(scaled_logits(logits, temperature), dim=-1)
    if top_p < 1.0:
        probs = nucleus(probs, top_p)
    cdf = probs.cumsum(-1)
    u = (1.0 - torch.rand_like(cdf[:, -1:])) * cdf[:, -1:]  # uniform in (0, total mass]
    return (cdf < u).sum(-1)  # inverse CDF: the first token whose cumulative mass reaches u


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` with zeros outside the smallest set of most likely tokens whose mass reaches `top_p`."""
    ranked, order = probs.sort(dim=-1, descending=True)
    before = ranked.cumsum(-1) - ranked  # mass of the more likely tokens; 0 for the first, which stays
    return torch.zeros_like(probs).scatter_(-1, order, ranked.masked_fill(before >= top_p, 0.0))
