"""Optional vLLM backend: an in-process engine on a CUDA GPU, with in-place weight updates.

Needs the `vllm` extra (vLLM >= 0.10.2 for `logprobs_mode`). The engine runs in this
process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so `load_weights` can reach the model.
Log-probs are vLLM's `processed_logprobs` of the sampled tokens: after temperature and
also after top-p/top-k (renormalised over the kept tokens), unlike the `hf` backend which
leaves top-p out; with `top_p = 1` both are `log_softmax(logits / temperature)`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import torch

from srpo_dsl.backends.base import BackendError, GenRequest, GenResult
from srpo_dsl.backends.hf import encode_prompts

MISSING = "the vllm backend needs the optional extra: pip install 'srpo-dsl[vllm]' (CUDA GPU required)"


class VLLMBackend:
    """Generation with `vllm.LLM`; `load_weights` copies trained parameters into the engine."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.5,
        use_chat_template: bool | None = None,
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
            logprobs_mode="processed_logprobs",
            **engine_args,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.use_chat_template = (
            bool(self.tokenizer.chat_template) if use_chat_template is None else use_chat_template
        )
        self.version = 0

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        """One `LLM.generate` call for the whole batch; request `i` is seeded with `seed + i`.

        Prompts are tokenised as in the `hf` backend (`encode_prompts`), so both format alike.
        """
        prompt_ids = encode_prompts(self.tokenizer, [r.prompt for r in requests], self.use_chat_template)
        params = [
            self._sampling_params(
                n=1,
                temperature=r.temperature,
                top_p=r.top_p,
                max_tokens=r.max_tokens,
                logprobs=0,
                seed=None if seed is None else seed + i,
            )
            for i, r in enumerate(requests)
        ]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        results = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [step[token].logprob for step, token in zip(completion.logprobs, ids)]
            finish = "stop" if completion.finish_reason == "stop" else "length"
            results.append(GenResult(list(out.prompt_token_ids), ids, logprobs, completion.text, finish))
        return results

    def load_weights(self, named_params: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copy (name, tensor) pairs in HF naming into the engine's model; bumps `version`."""
        weights = list(named_params)
        self.llm.apply_model(lambda model: model.load_weights(weights))
        self.llm.reset_prefix_cache()
        self.version += 1
        return self.version

    def sync_weights(self, state_dict: Mapping[str, torch.Tensor] | None = None) -> int:
        """`HFBackend.sync_weights`'s contract; the engine holds its own copy, so `state_dict` is required."""
        if state_dict is None:
            raise BackendError(
                "the vllm backend keeps its own weights: pass the trained state_dict to sync_weights"
            )
        return self.load_weights(state_dict.items())
