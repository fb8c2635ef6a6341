"""Optional vLLM backend: an in-process engine on a CUDA GPU, with in-place weight updates.

Needs the `vllm` extra (vLLM >= 0.10.2 for `logprobs_mode`). The engine runs in this
process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so `load_weights` can reach the model.
For training it is colocated with the DeepSpeed engine on the same GPU (TRL's
`vllm_mode="colocate"`): built with `enable_sleep_mode` and, under a launcher,
`distributed_executor_backend="external_launcher"` (one engine per rank, tensor parallel 1);
the trainer puts it to sleep (level 2: weights and KV cache released) before every update and
wakes it weights first, loads the new weights, then the KV cache. Written against vLLM's
documented API (`LLM.sleep`, `LLM.wake_up(tags=...)`, `LLM.apply_model`); it has not run here:
no GPU with vLLM was available when it was written (see docs/training.md).
The sampling controls map onto `SamplingParams` one to one (`sampling_params`): the stop strings as
`stop` with `include_stop_str_in_output=True` (the text ends with the stop string, as in the `hf`
engine), `top_k` (off, 0 here, is passed as -1: every vLLM version reads -1 as off, while some refuse 0),
`frequency_penalty`, `presence_penalty`,
`repetition_penalty` (vLLM's have the semantics `GenRequest` documents) and `min_tokens` (which in
vLLM also holds back stop strings). vLLM reports `finish_reason` "stop" both for its end-of-sequence
token and for a stop string, told apart by `stop_reason` (the string, else None or a stop token id),
and "length" at max_tokens (`finish_of`).

Log-probs are those of vLLM's `logprobs_mode` (default `processed_logprobs`): the sampled token's
log-prob after the penalties, the end-of-sequence block before `min_tokens`, the temperature and the
top-k/top-p cut (renormalised over the kept tokens). That is the `hf` engine's
`log_softmax(logits / temperature)` exactly when no control but the temperature changes the logits
(penalties off, top_k 0, top_p 1, past min_tokens); otherwise it is the distribution drawn from, not
the one the trainer recomputes (docs/objective.md). `logprobs_mode="raw_logprobs"` gives
`log_softmax(logits)` of the raw logits under every control: the trainer's distribution at temperature 1.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import torch

from srpo_dsl.backends.base import BackendError, GenRequest, GenResult, prompt_ids_of, request_seeds
from srpo_dsl.backends.chat import TokenizerChat, encode_prompts
from srpo_dsl.backends.hf import pad_id_of

MISSING = "the vllm backend needs the optional extra: pip install 'srpo-dsl[vllm]' (CUDA GPU required)"


class VLLMBackend:
    """Generation with `vllm.LLM`; `load_weights` copies trained parameters into the engine."""

    name = "vllm"
    merged_weights = True  # vLLM's model takes the base model's names: LoRA comes folded in

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.5,
        use_chat_template: bool | None = None,
        enable_sleep_mode: bool = False,
        logprobs_mode: str = "processed_logprobs",
        **engine_args: object,
    ):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            import vllm
        except ImportError:
            raise BackendError(MISSING) from None
        self._sampling_params = vllm.SamplingParams
        self.llm = vllm.LLM(
            model=model,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            logprobs_mode=logprobs_mode,
            enable_sleep_mode=enable_sleep_mode,
            **{"enable_prefix_caching": True, **engine_args},  # a conversation's turns share their prefix
        )
        self.sleep_mode = enable_sleep_mode
        self.asleep: set[str] = set()  # what level-2 sleep released and no wake_up has restored yet
        self.tokenizer = self.llm.get_tokenizer()
        self.pad_id: int = pad_id_of(self.tokenizer)  # the trainer pads with it
        self.use_chat_template = (
            bool(self.tokenizer.chat_template) if use_chat_template is None else use_chat_template
        )
        self.version = 0

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        """One `LLM.generate` call for the whole batch; each request is seeded with its own seed
        (`request_seeds`: `SamplingParams(seed=...)`, vLLM's per-request generator).

        Prompts are tokenised as in the `hf` backend (`encode_prompts`), so both format alike.
        """
        if self.asleep:
            raise BackendError(
                "the vllm engine is asleep (between sleep() and wake_up()): it cannot generate"
            )
        prompt_ids = prompt_ids_of(
            requests, lambda texts: encode_prompts(self.tokenizer, texts, self.use_chat_template)
        )
        params = [
            self._sampling_params(**sampling_params(r, request_seed))
            for r, request_seed in zip(requests, request_seeds(requests, seed))
        ]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        results = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [step[token].logprob for step, token in zip(completion.logprobs, ids)]
            finish, stop = finish_of(completion.finish_reason, completion.stop_reason)
            prompt = list(out.prompt_token_ids)
            results.append(GenResult(prompt, ids, logprobs, completion.text, finish, stop))
        return results

    def chat_encoder(self) -> TokenizerChat:
        """How a conversation agent's turns are encoded (as in the `hf` engine). Each later turn's prompt
        starts with the earlier turn's ids, which vLLM's prefix cache (on) finds in its KV blocks: only
        the new message is prefilled."""
        return TokenizerChat(self.tokenizer, self.use_chat_template, {self.tokenizer.eos_token_id})

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]] | None = None) -> int:
        """Stream (name, tensor) pairs in the base model's naming into the engine's model; version + 1."""
        if weights is None:
            raise BackendError("the vllm engine keeps its own weights: load_weights needs (name, tensor)s")
        self.llm.apply_model(lambda model: model.load_weights(weights))
        self.llm.reset_prefix_cache()
        self.version += 1
        return self.version

    def sleep(self) -> None:
        """Level 2: weights and KV cache released (the trainer loads every weight again on waking)."""
        if self.sleep_mode:
            self.llm.sleep(level=2)
            self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """`("weights",)` before `load_weights`, then `("kv_cache",)`; None: both. Only what sleeps."""
        waking = self.asleep & set(tags or ("weights", "kv_cache"))
        if waking:
            self.llm.wake_up(tags=sorted(waking))
            self.asleep -= waking


def sampling_params(request: GenRequest, seed: int | None) -> dict[str, object]:
    """`vllm.SamplingParams`' arguments for a request: one response with the sampled token's log-prob,
    its seed, and its sampling controls (the module's docstring)."""
    return {
        "n": 1,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "top_k": request.top_k or -1,  # -1: off in every vLLM version
        "frequency_penalty": request.frequency_penalty,
        "presence_penalty": request.presence_penalty,
        "repetition_penalty": request.repetition_penalty,
        "min_tokens": request.min_tokens,
        "stop": list(request.stop_strings),
        "include_stop_str_in_output": True,
        "max_tokens": request.max_tokens,
        "logprobs": 0,
        "seed": seed,
    }


def finish_of(finish_reason: str | None, stop_reason: int | str | None) -> tuple[str, str | None]:
    """A vLLM completion's (`finish_reason`, `stop_reason`) as a `GenResult`'s (finish reason, stop
    string): "stop" with a string is a stop string, "stop" with None (or a stop token id) the end of
    sequence, "length" max_tokens; anything else (an aborted request) is a `BackendError`."""
    if finish_reason == "length":
        return "length", None
    if finish_reason == "stop":
        return ("stop", stop_reason) if isinstance(stop_reason, str) else ("eos", None)
    raise BackendError(f"vLLM ended a request with finish_reason `{finish_reason}` (not stop or length)")
