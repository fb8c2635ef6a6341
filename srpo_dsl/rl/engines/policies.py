"""A workflow's policies, built for training: each one's module, its rollout engine and, when trainable,
its DeepSpeed engine.

A shared policy (LLM-sharing) is one engine; non-sharing workflows declare one policy per
role, hence one engine per role. Frozen policies get no engine: a plain eval module.
Each policy generates through a rollout engine (`RolloutEngine`), built by its entry of
`ROLLOUT_ENGINES` and treated as that entry's capabilities say (`RolloutEngineKind`). An engine that
generates with the trainer's module (`hf`) shares it, except under ZeRO-3 where the module is
partitioned: it then generates with a full copy, so generation runs no collectives and ranks may
generate different numbers of tokens, or nothing. One that loads the weights itself (`vllm`) holds
its own copy, colocated on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from srpo_dsl.backends.base import BackendError, RolloutEngine, load_errors, model_load_error
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.lang.checks.declarations import PolicyInfo
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.compile.graph import BASE_ADAPTER, EventGraph
from srpo_dsl.registries import ROLLOUT_ENGINES, RolloutEngineKind
from srpo_dsl.rl.distributed.process_group import Dist
from srpo_dsl.rl.engines.adapters import lora_config, with_adapters
from srpo_dsl.rl.engines.ds_engine import TrainEngine, build_engine
from srpo_dsl.rl.engines.weight_sync import full_state, push_weights
from srpo_dsl.seeds import seed_of

if TYPE_CHECKING:  # heavy imports: transformers and peft load when a model does
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Wrap = Callable[[torch.nn.Module], torch.nn.Module]  # a loaded model as the engine trains it (LoRA, adapters)


@dataclass(frozen=True)
class Rollout:
    """How a run generates: the rollout engine (`hf`, or `vllm` colocated on the GPU: a name of
    `ROLLOUT_ENGINES`) and the `hf` engine's decode loop (`srpo_dsl.backends.decoding`)."""

    engine: str = "hf"
    decode: str = "auto"

    @property
    def kind(self) -> RolloutEngineKind:
        """The engine's entry: its factory and what it can do."""
        return ROLLOUT_ENGINES.lookup(self.engine)


@dataclass
class TrainingPolicy:
    """A policy's module, its rollout engine and, when trainable, its DeepSpeed engine (None when frozen).

    Policies on one shared base (adapters, and the base itself) share its module, backend and
    engine: `adapter` is the peft adapter their rows go through, `owner` the policy whose name
    the engine is saved under, `adapters` every adapter the engine trains.
    """

    name: str
    module: torch.nn.Module
    backend: RolloutEngine
    engine: TrainEngine | None = None  # a deepspeed.DeepSpeedEngine
    reference: torch.nn.Module | None = None  # frozen initial weights, for the KL penalty (an adapter's: the
    # shared module)
    adapter: str | None = None
    owner: str = ""
    adapters: tuple[str, ...] = ()

    @property
    def model(self) -> torch.nn.Module:
        """The forward entry point: the engine when trainable (ZeRO hooks), else the module."""
        if isinstance(self.engine, torch.nn.Module):  # DeepSpeed's engine is a module
            return self.engine
        return self.module

    @property
    def trained_engine(self) -> TrainEngine:
        """The engine of a trainable policy (`engine_owners` gives only those)."""
        if self.engine is None:
            raise ValueError(f"policy {self.name} is frozen: it has no engine")
        return self.engine

    @property
    def engine_owner(self) -> str:
        return self.owner or self.name

    @property
    def pad_id(self) -> int:
        """The token id its rows are padded with: its rollout engine's."""
        return self.backend.pad_id


def engine_owners(policies: Mapping[str, TrainingPolicy]) -> dict[str, TrainingPolicy]:
    """One policy per engine, keyed by the name the engine is saved under (adapters share their base's)."""
    out: dict[str, TrainingPolicy] = {}
    for p in policies.values():
        if p.engine is not None:
            out.setdefault(p.engine_owner, p)
    return out


def load_model(path: str, dist: Dist) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """The causal LM at `path` (bf16 on CUDA, fp32 on CPU; a transformers `PreTrainedModel`, as the module
    the engines move and wrap) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if dist.device.type == "cuda" else torch.float32
    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype), AutoTokenizer.from_pretrained(path)
    except load_errors() as exc:
        raise model_load_error(path, exc) from None


def checkpoint_layers(module: torch.nn.Module) -> int:
    """Gradient checkpointing of each transformer layer, dropout still off; returns how many layers.

    transformers checkpoints a layer only while it is in training mode, and the trainer's modules stay in
    eval mode (dropout off: exact ratios): so the layers alone are marked training, their submodules are
    not. Set before each update (generation puts the whole module back in eval mode); a no-grad pass
    (old log-probs, the reference, generation) is never checkpointed."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in module.modules() if isinstance(m, GradientCheckpointingLayer)]
    if layers and not layers[0].gradient_checkpointing:
        for model in {
            id(m): m for m in module.modules() if hasattr(m, "gradient_checkpointing_enable")
        }.values():
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            break
    for layer in layers:
        layer.training = True
    return len(layers)


def with_lora(model: torch.nn.Module, lora: Mapping[str, object]) -> torch.nn.Module:
    from peft import get_peft_model

    return get_peft_model(model, lora_config(lora))


def build_policies(
    graph: EventGraph,
    paths: Mapping[str, str],
    opts: TrainOptions,
    dist: Dist,
    config: Mapping[str, object],
    rollout: Rollout = Rollout(),
) -> dict[str, TrainingPolicy]:
    """Every policy of the workflow: one engine per trainable policy, one per base that hosts adapters;
    `rollout` says how they generate."""
    hosts = adapter_hosts(graph, rollout)
    out: dict[str, TrainingPolicy] = {}
    for name, spec in graph.policies.items():
        if spec.base is None and name not in hosts:
            torch.manual_seed(seed_of("init", opts.seed, name))  # LoRA weights: the run's seed, per engine
            out[name] = build_policy(name, paths[name], spec, opts, dist, config, rollout)
    for base in hosts:
        torch.manual_seed(seed_of("init", opts.seed, base))
        out |= build_adapter_group(graph, base, paths[base], opts, dist, config, rollout)
    return {name: out[name] for name in graph.policies}


def adapter_hosts(graph: EventGraph, rollout: Rollout) -> list[str]:
    """The bases hosting adapter(...) policies, if the rollout engine serves adapters (else BackendError)."""
    hosts = list(dict.fromkeys(p.base for p in graph.policies.values() if p.base is not None))
    if hosts and not rollout.kind.serves_adapters:
        serving = " or ".join(name for name, kind in ROLLOUT_ENGINES.items() if kind.serves_adapters)
        raise BackendError(
            f"--backend {rollout.engine}: adapter(...) policies generate with the {serving} backend only"
        )
    return hosts


def build_policy(
    name: str,
    path: str,
    spec: PolicyInfo,
    opts: TrainOptions,
    dist: Dist,
    config: Mapping[str, object],
    rollout: Rollout = Rollout(),
) -> TrainingPolicy:
    """Load `path`; trainable: (LoRA,) AdamW and a DeepSpeed engine from `config`; frozen: an eval module."""
    model, tokenizer = load_model(path, dist)
    with_module = rollout.kind.generates_with_module  # else the engine loads the weights onto the GPU itself
    if not spec.trainable:  # the frozen module goes to the device only if the engine generates with it
        model.to(dist.device if with_module else "cpu").eval().requires_grad_(False)
        return TrainingPolicy(
            name, model, rollout_engine(rollout, model if with_module else None, tokenizer, path, dist)
        )
    reference = None
    if opts.kl > 0:
        reference = load_model(path, dist)[0].to(dist.device).eval().requires_grad_(False)
    lora = spec.lora
    wrap: Wrap = (lambda m: with_lora(m, lora)) if lora else (lambda m: m)
    engine = build_engine(wrap(model), opts, config)
    module = hf_rollout_module(engine, path, wrap, dist) if with_module else None
    backend = rollout_engine(rollout, module, tokenizer, path, dist)
    return TrainingPolicy(name, engine.module, backend, engine, reference)


def build_adapter_group(
    graph: EventGraph,
    base: str,
    path: str,
    opts: TrainOptions,
    dist: Dist,
    config: Mapping[str, object],
    rollout: Rollout = Rollout(),
) -> dict[str, TrainingPolicy]:
    """The frozen `base` and its adapter policies: one model in memory, one engine training every adapter
    (each clipped on its own, so DeepSpeed's clipping is off), one rollout engine generating for all of them
    with its module (`adapter_hosts` checked that `rollout` serves adapters)."""
    adapters = graph.adapters_on(base)
    model, tokenizer = load_model(path, dist)
    model.requires_grad_(False)
    wrap: Wrap = lambda m: with_adapters(m, adapters)  # noqa: E731
    engine = build_engine(wrap(model), opts, {**config, "gradient_clipping": 0.0})
    backend = rollout_engine(rollout, hf_rollout_module(engine, path, wrap, dist), tokenizer, path, dist)
    reference = engine.module if opts.kl > 0 else None  # scored without adapters: the base
    group = {base: TrainingPolicy(base, engine.module, backend, adapter=BASE_ADAPTER, owner=base)}
    for name, adapter in graph.adapters.items():
        if graph.policies[name].base == base:
            group[name] = TrainingPolicy(
                name, engine.module, backend, engine, reference, adapter, base, tuple(adapters)
            )
    return group


def rollout_engine(
    rollout: Rollout,
    module: torch.nn.Module | None,
    tokenizer: PreTrainedTokenizerBase,
    path: str,
    dist: Dist,
) -> RolloutEngine:
    """The engine `rollout.engine` names (`ROLLOUT_ENGINES`), its factory called
    `(module, tokenizer, path, dist, decode)`: `module` is None for one that loads `path` itself."""
    engine: RolloutEngine = rollout.kind.make(module, tokenizer, path, dist, rollout.decode)  # a plugin's
    return engine


def hf_engine(
    module: PreTrainedModel | PeftModel | None,
    tokenizer: PreTrainedTokenizerBase,
    path: str,
    dist: Dist,
    decode: str,
) -> RolloutEngine:
    """`hf`: generates with the trainer's own module (its weights need no copy)."""
    if module is None:
        raise BackendError("the hf rollout engine generates with the trainer's module: it was given none")
    return HFBackend(module, tokenizer=tokenizer, decode=decode)


def hf_rollout_module(engine: TrainEngine, path: str, wrap: Wrap, dist: Dist) -> torch.nn.Module:
    """The module the `hf` engine generates with: the engine's own, or under ZeRO-3 a full copy."""
    if engine.zero_optimization_stage() != 3:
        return engine.module
    rollout = wrap(load_model(path, dist)[0]).to(dist.device)
    with full_state(engine.module) as state:
        rollout.load_state_dict(state)
    return rollout.eval().requires_grad_(False)


def vllm_engine(
    module: torch.nn.Module | None, tokenizer: PreTrainedTokenizerBase, path: str, dist: Dist, decode: str
) -> RolloutEngine:
    """`vllm`: a colocated `vllm.LLM` loading `path` on this rank's GPU: sleep mode on; under a launcher
    one engine per rank (`external_launcher`). Its share of GPU memory: SRPO_DSL_VLLM_MEMORY (default 0.3)."""
    from srpo_dsl.backends.vllm import VLLMBackend
    from srpo_dsl.rl.engines.fit import vllm_memory_share

    launched = dist.world_size > 1
    return VLLMBackend(
        path,
        dtype="bfloat16",
        gpu_memory_utilization=vllm_memory_share(),
        enable_sleep_mode=True,
        seed=dist.rank,
        **({"distributed_executor_backend": "external_launcher"} if launched else {}),
    )


def sync_weights(policies: Mapping[str, TrainingPolicy]) -> None:
    """After the update (also one that trained nothing: a level-2 sleep discarded vLLM's weights), each
    engine's weights reach its rollout engine, which wakes: policy version + 1 (collective at ZeRO-3)."""
    for p in engine_owners(policies).values():
        push_weights(p.backend, p.module)
