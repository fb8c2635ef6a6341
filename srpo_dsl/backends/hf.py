"""In-process generation with transformers.

Each response token carries its log-prob as defined in `srpo_dsl.backends.logprobs` (the
module the trainer scores with, so recomputed and reported values agree). A response ends
with its end-of-sequence token when it stopped (`finish_reason == "stop"`); that token is
part of the action and carries a log-prob.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from srpo_dsl.backends.base import (
    BackendError,
    GenRequest,
    GenResult,
    model_load_error,
    prompt_ids_of,
    request_seeds,
)
from srpo_dsl.backends.chat import TokenizerChat, encode_prompts
from srpo_dsl.backends.decoding import Chunk, DecodeStats, StaticDecoder, make_decoder, resolve_mode
from srpo_dsl.seeds import SEED_BITS


def pad_id_of(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The token id rows are padded with: the tokenizer's pad token, else its end-of-sequence token."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _prefixes(requests: list[GenRequest]) -> list[int | None] | None:
    """Each request's conversation prefix (`GenRequest.prefix`), or None when no request is a conversation."""
    prefixes = [r.prefix for r in requests]
    return None if all(p is None for p in prefixes) else prefixes


def _fresh_seed() -> int:
    """A seed for a request that has none: drawn from torch's global generator (`torch.manual_seed`)."""
    return int(torch.randint(0, 2**SEED_BITS - 1, ()))


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
        decode: str = "auto",
    ):
        if isinstance(model_or_path, (str, Path)):
            try:
                tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(model_or_path))
                model = AutoModelForCausalLM.from_pretrained(
                    str(model_or_path), dtype=_resolve_dtype(dtype, device)
                )
            except (OSError, ValueError) as exc:
                raise model_load_error(str(model_or_path), exc) from None
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
        pad = pad_id_of(tokenizer)
        if pad is None or not self.eos_ids:
            raise BackendError(
                "the tokenizer needs an end-of-sequence token (and a pad token, or EOS as pad)"
            )
        self.pad_id: int = pad
        self.version = 0
        self.awake = True
        self.hosts_adapters = hasattr(model, "peft_config")  # a PeftModel: requests may name an adapter
        mode = resolve_mode(decode, self.device)
        self.decoder = make_decoder(mode, model, self.pad_id, self.eos_ids)

    def chat_encoder(self) -> TokenizerChat:
        """How a conversation agent's turns are encoded: this model's chat template (else raw text)."""
        return TokenizerChat(self.tokenizer, self.use_chat_template, self.eos_ids)

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
        """Before the update: `static` drops its kept caches (`compiled` keeps them: its graphs replay on
        them; a dynamic cache lives for one call), and the allocator's cached blocks go back (CUDA)."""
        self.awake = False
        self.decoder.release()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        self.awake = True

    def decode_stats(self) -> dict[str, float]:
        """The decode loop's compiles and kept caches so far (`decoding.DecodeStats`; zeros for `dynamic`,
        which keeps and compiles nothing)."""
        return asdict(getattr(self.decoder, "stats", DecodeStats()))

    def cap_decode_caches(self, nbytes: float) -> None:
        """Keep at most `nbytes` of static caches between calls (the least recently used shapes dropped)."""
        if isinstance(self.decoder, StaticDecoder):
            self.decoder.stats.cache_cap = nbytes

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        """One batched decode per chunk of requests with equal (temperature, top_p); each request draws
        with its seed (`request_seeds`; without any, one from torch's global generator)."""
        if not requests:
            return []
        if not self.awake:
            raise BackendError("the hf engine is asleep (between sleep() and wake_up()): it cannot generate")
        prompt_ids = prompt_ids_of(
            requests, lambda texts: encode_prompts(self.tokenizer, texts, self.use_chat_template)
        )
        seeds = [s if s is not None else _fresh_seed() for s in request_seeds(requests, seed)]
        groups: dict[tuple[float, float], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.temperature, r.top_p), []).append(i)
        results: list[GenResult | None] = [None] * len(requests)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for (temperature, top_p), members in groups.items():
                    # less padding per chunk; each adapter's rows together (LoRA runs over row blocks)
                    members.sort(key=lambda i: (requests[i].adapter or "", len(prompt_ids[i])))
                    for start in range(0, len(members), self.max_batch_size):
                        chunk = members[start : start + self.max_batch_size]
                        outs = self._generate_chunk(
                            [prompt_ids[i] for i in chunk],
                            [requests[i].max_tokens for i in chunk],
                            [seeds[i] for i in chunk],
                            temperature,
                            top_p,
                            self._routing([requests[i] for i in chunk]),
                            _prefixes([requests[i] for i in chunk]),
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
        seeds: list[int],
        temperature: float,
        top_p: float,
        adapters: list[str | None] | None = None,
        prefixes: list[int | None] | None = None,
    ) -> list[GenResult]:
        """Decode one chunk with the engine's decode loop (`decoding`); `seeds`: each row's sampling
        seed; `adapters`: each row's LoRA adapter (one batch may mix them); `prefixes`: each conversation
        row's `GenRequest.prefix`."""
        chunk = Chunk(prompts, max_tokens, seeds, temperature, top_p, adapters, prefixes)
        tokens, logprobs = self.decoder.decode(chunk)
        return self._results(prompts, tokens.tolist(), logprobs.tolist(), max_tokens)

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
