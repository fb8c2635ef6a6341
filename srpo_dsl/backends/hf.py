"""In-process generation with transformers.

Each response token carries its log-prob as defined in `srpo_dsl.backends.logprobs` (the
module the trainer scores with, so recomputed and reported values agree), whatever sampling
controls shaped the draw (`draw`). A response ends with its end-of-sequence token when it drew one
(`finish_reason == "eos"`); that token is part of the action and carries a log-prob. A response
that reached one of its stop strings ends with the token that completed it (`finish_reason ==
"stop"`, `stops`): its text ends with the stop string.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from srpo_dsl.backends.base import (
    BackendError,
    GenRequest,
    GenResult,
    load_errors,
    model_load_error,
    prompt_ids_of,
    request_seeds,
)
from srpo_dsl.backends.chat import TokenizerChat, encode_prompts
from srpo_dsl.backends.decoding import Chunk, DecodeStats, StaticDecoder, make_decoder, resolve_mode
from srpo_dsl.backends.stops import StopMatch, StopWatch
from srpo_dsl.seeds import SEED_BITS

if TYPE_CHECKING:  # peft loads with a LoRA model
    from peft import PeftModel


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
        model_or_path: str | Path | PreTrainedModel | PeftModel,  # a PeftModel: one that hosts adapters
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
            except load_errors() as exc:
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
        """One batched decode per chunk of requests with equal sampling settings (`_shared`); each request
        draws with its seed (`request_seeds`; without any, one from torch's global generator)."""
        if not requests:
            return []
        if not self.awake:
            raise BackendError("the hf engine is asleep (between sleep() and wake_up()): it cannot generate")
        prompt_ids = prompt_ids_of(
            requests, lambda texts: encode_prompts(self.tokenizer, texts, self.use_chat_template)
        )
        seeds = [s if s is not None else _fresh_seed() for s in request_seeds(requests, seed)]
        groups: dict[tuple[float, ...], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(_shared(r), []).append(i)
        results: list[GenResult | None] = [None] * len(requests)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for members in groups.values():
                    # less padding per chunk; each adapter's rows together (LoRA runs over row blocks)
                    members.sort(key=lambda i: (requests[i].adapter or "", len(prompt_ids[i])))
                    for start in range(0, len(members), self.max_batch_size):
                        chunk = members[start : start + self.max_batch_size]
                        reqs, ids = [requests[i] for i in chunk], [prompt_ids[i] for i in chunk]
                        outs = self._generate_chunk(reqs, ids, [seeds[i] for i in chunk])
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
        self, requests: list[GenRequest], prompts: list[list[int]], seeds: list[int]
    ) -> list[GenResult]:
        """Decode one chunk of requests with equal sampling settings with the engine's decode loop
        (`decoding`); `prompts`: their prompt ids; `seeds`: each row's sampling seed. One batch may mix
        LoRA adapters, min_tokens and stop strings."""
        first = requests[0]
        least = [r.min_tokens for r in requests]
        watch = None
        if any(r.stop_strings for r in requests):
            watch = StopWatch(self._text, self._texts, [r.stop_strings for r in requests], least)
        chunk = Chunk(
            prompts,
            [r.max_tokens for r in requests],
            seeds,
            first.temperature,
            first.top_p,
            self._routing(requests),
            _prefixes(requests),
            first.top_k,
            first.penalties(),
            least if any(least) else None,
            watch,
        )
        tokens, logprobs = self.decoder.decode(chunk)
        return self._results(chunk, tokens.tolist(), logprobs.tolist())

    def _text(self, ids: Sequence[int]) -> str:
        """The text of response ids (special tokens, end-of-sequence among them, left out)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _texts(self, responses: list[list[int]]) -> list[str]:
        """`_text` of several responses, in one tokenizer call."""
        return self.tokenizer.batch_decode(responses, skip_special_tokens=True)

    def _results(self, chunk: Chunk, tokens: list[list[int]], logprobs: list[list[float]]) -> list[GenResult]:
        """Each row up to its first end-of-sequence token (kept: part of the action), the token that
        completed its stop string when one comes before (`stops.match`), or its limit. Every row's text
        is decoded in one call."""
        ends = [self._end(chunk, row, ids) for row, ids in enumerate(tokens)]
        said = [ids[: n - (f == "eos")] for ids, (n, f) in zip(tokens, ends)]
        texts = self._texts(said)
        found: list[StopMatch | None] = [None] * len(said)
        if chunk.stops is not None:
            found = [
                chunk.stops.match(r, x, t) if chunk.stops.watches(r) else None
                for r, (x, t) in enumerate(zip(said, texts))
            ]
        return [
            GenResult(p, ids[:n], lps[:n], text, f, None)
            if stop is None
            else GenResult(p, ids[: stop.tokens], lps[: stop.tokens], stop.text, "stop", stop.stop)
            for p, ids, lps, (n, f), text, stop in zip(chunk.prompts, tokens, logprobs, ends, texts, found)
        ]

    def _end(self, chunk: Chunk, row: int, ids: list[int]) -> tuple[int, str]:
        """Row `row`'s kept tokens and its finish reason, before any stop string."""
        limit = chunk.max_tokens[row]
        end = next((k for k, t in enumerate(ids[:limit]) if t in self.eos_ids), None)
        return (limit, "length") if end is None else (end + 1, "eos")


def _shared(r: GenRequest) -> tuple[float, ...]:
    """The settings a chunk's requests share: temperature, top-p, top-k and the penalties."""
    return (r.temperature, r.top_p, r.top_k, *r.penalties())
