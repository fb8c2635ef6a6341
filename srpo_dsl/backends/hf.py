"""In-process generation with transformers, and the batched log-prob pass the trainer reuses.

Log-probs are those of the sampled tokens under `softmax(logits / temperature)` of the raw
model logits (temperature 0, i.e. greedy, uses 1). Nucleus truncation (`top_p`) is *not*
folded in, and top-k is switched off, so `token_logprobs` recomputes exactly what
`generate` reports. A response ends with its end-of-sequence token when it stopped
(`finish_reason == "stop"`); that token is part of the action and carries a log-prob.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from srpo_dsl.backends.base import BackendError, GenRequest, GenResult


@dataclass(frozen=True)
class TokenBatch:
    """Prompt + response rows, right-padded: `[B, L]` ids, attention mask and response mask."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor  # bool, True on response tokens only


def pack_sequences(prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int) -> TokenBatch:
    """Concatenate each prompt with its response and right-pad the batch."""
    rows = [p + r for p, r in zip(prompt_ids, response_ids, strict=True)]
    width = max(len(row) for row in rows)
    input_ids = torch.tensor([row + [pad_id] * (width - len(row)) for row in rows], dtype=torch.long)
    positions = torch.arange(width)
    lengths = torch.tensor([len(row) for row in rows])
    starts = torch.tensor([len(p) for p in prompt_ids])
    attention_mask = (positions < lengths[:, None]).long()
    response_mask = (positions >= starts[:, None]) & (positions < lengths[:, None])
    return TokenBatch(input_ids, attention_mask, response_mask)


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`[B, L]` log-probs of each token given its prefix, 0.0 where `response_mask` is off.

    One forward pass; differentiable when called under grad. Position ids follow the
    attention mask, so left- and right-padded layouts give the same values. With
    `with_entropy`, also the `[B, L]` entropy of the distribution each token was drawn from.
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logits = logits[:, :-1].float() / (temperature if temperature > 0 else 1.0)
    targets = input_ids[:, 1:]
    norm = torch.logsumexp(logits, dim=-1)
    picked = F.pad(logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - norm, (1, 0))
    mask = response_mask.bool()
    logprobs = torch.where(mask, picked, torch.zeros_like(picked))
    if not with_entropy:
        return logprobs
    entropy = F.pad(norm - (logits.softmax(-1) * logits).sum(-1), (1, 0))  # H = logZ - E_p[logit]
    return logprobs, torch.where(mask, entropy, torch.zeros_like(entropy))


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

    def sync_weights(self, state_dict: dict[str, torch.Tensor] | None = None) -> int:
        """After an optimizer step: load `state_dict` (none when the module is shared); version + 1."""
        if state_dict is not None:
            self.model.load_state_dict(state_dict)
        self.version += 1
        return self.version

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        """One batched `model.generate` per chunk of requests with equal (temperature, top_p)."""
        if not requests:
            return []
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
                    members.sort(key=lambda i: len(prompt_ids[i]))  # less padding per chunk
                    for start in range(0, len(members), self.max_batch_size):
                        chunk = members[start : start + self.max_batch_size]
                        outs = self._generate_chunk(
                            [prompt_ids[i] for i in chunk],
                            [requests[i].max_tokens for i in chunk],
                            temperature,
                            top_p,
                        )
                        for i, out in zip(chunk, outs):
                            results[i] = out
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _generate_chunk(
        self, prompts: list[list[int]], max_tokens: list[int], temperature: float, top_p: float
    ) -> list[GenResult]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, p in enumerate(prompts):  # left padding
            input_ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention_mask[row, width - len(p) :] = 1
        sample = temperature > 0
        sampling = {"temperature": temperature, "top_p": top_p, "top_k": 0} if sample else {}
        config = GenerationConfig(
            max_new_tokens=max(max_tokens),
            do_sample=sample,
            **sampling,
            repetition_penalty=1.0,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids),
            return_dict_in_generate=True,
            output_logits=True,
        )
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            generation_config=config,
        )
        new_tokens = out.sequences[:, width:]
        scale = temperature if sample else 1.0
        logprobs = torch.stack(
            [
                torch.log_softmax(step.float() / scale, dim=-1)
                .gather(-1, new_tokens[:, k : k + 1])
                .squeeze(-1)
                for k, step in enumerate(out.logits)
            ],
            dim=1,
        )
        return [
            self._result(p, ids, lps, limit)
            for p, ids, lps, limit in zip(prompts, new_tokens.tolist(), logprobs.tolist(), max_tokens)
        ]

    def _result(self, prompt: list[int], ids: list[int], logprobs: list[float], limit: int) -> GenResult:
        """Truncate to this request's `max_tokens` and cut after the first end-of-sequence token."""
        ids = ids[:limit]
        end = next((k for k, t in enumerate(ids) if t in self.eos_ids), None)
        finish = "length" if end is None else "stop"
        n = len(ids) if end is None else end + 1
        text = self.tokenizer.decode(ids[: n - (finish == "stop")], skip_special_tokens=True)
        return GenResult(prompt, ids[:n], logprobs[:n], text, finish)
