"""The `vllm` rollout engine's logic on CPU: vLLM cannot be installed here, so a stand-in module gives
`vllm.LLM` and `vllm.SamplingParams` the documented surface the backend uses (generate with
`prompt_token_ids`, `sleep(level)`, `wake_up(tags)`, `apply_model`, `reset_prefix_cache`) over a
transformers model, and behaves as level-2 sleep does: the weights are gone until loaded again."""

from __future__ import annotations

import copy
import sys
import types

import pytest
import torch

from srpo_dsl.backends.base import BackendError, GenRequest, RolloutEngine
from srpo_dsl.backends.chat import encode_prompts
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.seeds import seed_of
from tests.support.training import policy_spec


class Model:
    """What `LLM.apply_model` hands over: a model whose `load_weights` takes HF-named tensors and
    refuses names it does not have, as vLLM's models do."""

    def __init__(self, hf: torch.nn.Module):
        self.hf = hf

    def load_weights(self, weights) -> set[str]:
        params = dict(self.hf.named_parameters())
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                if name not in params:
                    raise KeyError(f"unexpected weight {name}")
                params[name].copy_(tensor)
                loaded.add(name)
        return loaded


class LLM:
    """`vllm.LLM`'s surface over a transformers model (fp32 on CPU, whatever `dtype` asks)."""

    made: list[LLM] = []  # noqa: RUF012

    def __init__(self, model: str, **kwargs):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.kwargs, self.calls, self.asleep = kwargs, [], False
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.hf = AutoModelForCausalLM.from_pretrained(model).eval()
        LLM.made.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def sleep(self, level: int = 1) -> None:
        self.calls.append(("sleep", level))
        self.asleep = True
        if level == 2:  # weights discarded: garbage until loaded again
            with torch.no_grad():
                for p in self.hf.parameters():
                    p.fill_(float("nan"))

    def wake_up(self, tags=None) -> None:
        self.calls.append(("wake_up", tuple(tags or ("weights", "kv_cache"))))
        self.asleep = "kv_cache" not in (tags or ("kv_cache",))

    def apply_model(self, fn):
        self.calls.append(("apply_model",))
        return [fn(Model(self.hf))]

    def reset_prefix_cache(self) -> None:
        self.calls.append(("reset_prefix_cache",))

    def generate(self, prompts, params, use_tqdm=True):
        assert not self.asleep, "generate while asleep"
        engine = HFBackend(self.hf, tokenizer=self.tokenizer)
        out = []
        self.seeds = [p.seed for p in params]  # each request's own generator seed
        self.params = params
        for prompt, p in zip(prompts, params):
            ids = prompt["prompt_token_ids"]
            (r,) = engine.generate([p.request(ids)])
            logprobs = [
                {t: types.SimpleNamespace(logprob=lp)} for t, lp in zip(r.response_token_ids, r.logprobs)
            ]
            done = types.SimpleNamespace(  # vLLM's reasons: "stop" for both, the string in stop_reason
                token_ids=r.response_token_ids,
                logprobs=logprobs,
                text=r.text,
                finish_reason="length" if r.finish_reason == "length" else "stop",
                stop_reason=r.stop_string,
            )
            out.append(types.SimpleNamespace(prompt_token_ids=ids, outputs=[done]))
        return out


class SamplingParams:
    """`vllm.SamplingParams`' keyword arguments as the backend passes them (vLLM >= 0.10.2's names)."""

    def __init__(self, *, n, logprobs, include_stop_str_in_output, **kwargs):
        assert n == 1 and logprobs == 0 and include_stop_str_in_output
        self.kwargs = kwargs
        self.seed, self.max_tokens = kwargs["seed"], kwargs["max_tokens"]
        assert isinstance(kwargs["stop"], list) and (kwargs["top_k"] == -1 or kwargs["top_k"] >= 1)

    def request(self, ids):
        """The `hf` engine's request that samples as these parameters ask."""
        kwargs = {k: v for k, v in self.kwargs.items() if k not in ("stop", "top_k")}
        top_k = max(0, self.kwargs["top_k"])  # vLLM's -1: off
        return GenRequest(
            "", **kwargs, stop_strings=tuple(self.kwargs["stop"]), top_k=top_k, prompt_ids=tuple(ids)
        )


@pytest.fixture
def vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    LLM.made = []
    return module


def test_backend_generates_and_passes_sleep_and_wake_through(vllm, models):
    from srpo_dsl.backends import GenRequest, make_backend

    engine = make_backend("vllm", str(models[0]), enable_sleep_mode=True)
    assert isinstance(engine, RolloutEngine) and engine.merged_weights
    llm = LLM.made[0]
    assert llm.kwargs["logprobs_mode"] == "processed_logprobs" and llm.kwargs["enable_sleep_mode"]
    results = engine.generate([GenRequest("S 1+2=", 5, seed=11), GenRequest("S 3+4=", 5)], seed=7)
    assert llm.seeds == [11, seed_of(7, 1)]  # a request's own seed, else the call's with its index
    assert [len(r.logprobs) for r in results] == [len(r.response_token_ids) for r in results]
    with pytest.raises(BackendError, match="needs \\(name, tensor\\)"):
        engine.load_weights(None)
    engine.wake_up(("weights",))  # awake already (as after a checkpoint is restored): nothing to wake
    assert llm.calls == []
    engine.sleep()
    with pytest.raises(BackendError, match="asleep"):
        engine.generate([GenRequest("S 1+2=", 5)])
    engine.wake_up(("weights",))
    assert engine.load_weights(iter(dict(copy.deepcopy(llm.hf).named_parameters()).items())) == 1
    engine.wake_up(("kv_cache",))
    assert llm.calls == [
        ("sleep", 2),
        ("wake_up", ("weights",)),
        ("apply_model",),
        ("reset_prefix_cache",),
        ("wake_up", ("kv_cache",)),
    ]


@pytest.mark.slow
def test_push_weights_folds_lora_in_and_the_engine_then_samples_the_trained_policy(vllm, models, dist):
    from srpo_dsl.backends import GenRequest
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.engines.ds_engine import ds_config
    from srpo_dsl.rl.engines.policies import Rollout, build_policy
    from srpo_dsl.rl.engines.weight_sync import push_weights

    opts = TrainOptions()
    config = ds_config(opts, device="cpu", world_size=dist.world_size)
    spec = policy_spec(trainable=True, lora={"r": 4, "alpha": 8, "dropout": 0.0, "targets": "all-linear"})
    policy = build_policy("p", str(models[0]), spec, opts, dist, config, rollout=Rollout("vllm"))
    llm = LLM.made[0]
    assert llm.kwargs["seed"] == dist.rank and "distributed_executor_backend" not in llm.kwargs  # one process
    with torch.no_grad():  # stands in for an optimizer step: every LoRA B moves off zero
        for name, p in policy.module.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    policy.backend.sleep()
    push_weights(policy.backend, policy.module)
    assert [c[0] for c in llm.calls] == ["sleep", "wake_up", "apply_model", "reset_prefix_cache", "wake_up"]
    assert policy.backend.version == 1 and policy.pad_id == llm.tokenizer.pad_token_id  # rows pad with it
    merged = copy.deepcopy(policy.module).merge_and_unload()
    engine_weights = dict(llm.hf.named_parameters())
    for name, p in merged.named_parameters():
        assert torch.allclose(engine_weights[name], p, atol=1e-6), name
    request = [GenRequest("S 17+25=", 6, temperature=1.0, seed=3)]
    reference = HFBackend(merged, tokenizer=llm.tokenizer)
    ids = tuple(encode_prompts(llm.tokenizer, ["S 17+25="], False)[0])
    want = reference.generate([GenRequest("", 6, 1.0, seed=3, prompt_ids=ids)])
    got = policy.backend.generate(request)
    assert got[0].response_token_ids == want[0].response_token_ids
