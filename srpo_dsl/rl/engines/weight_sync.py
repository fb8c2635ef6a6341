"""Weights from a trained module to its rollout engine (`RolloutEngine`), after every optimizer step.

`push_weights` wakes the engine, streams the new weights into it (one parameter at a time,
gathered under ZeRO-3; for `vllm` a LoRA model's weights folded into the base model's names)
and bumps its policy version. An `hf` engine that generates with the trained module itself
receives nothing: it already holds them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from srpo_dsl.backends.base import RolloutEngine
from srpo_dsl.rl.distributed.ds_import import import_deepspeed

if TYPE_CHECKING:  # peft loads with a LoRA model
    from peft import PeftModel
    from peft.tuners.lora.layer import LoraLayer


@contextmanager
def full_state(module: torch.nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """The module's full state dict for the duration (gathered under ZeRO-3: collective)."""
    deepspeed = import_deepspeed()

    with deepspeed.zero.GatheredParameters(list(module.parameters())):
        yield module.state_dict()


def rollout_weights(module: torch.nn.Module, merged: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """Each parameter's full tensor, one at a time (gathered under ZeRO-3: collective, so every rank
    iterates); with `merged`, a LoRA model's weights folded into the base model's names."""
    deepspeed = import_deepspeed()

    if merged:
        from peft import PeftModel

        if isinstance(module, PeftModel):
            yield from merged_lora_weights(module)
            return
    for name, param in module.named_parameters():
        with deepspeed.zero.GatheredParameters([param]):
            yield name, param.data


def merged_lora_weights(module: PeftModel) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's parameters under its own names with each active LoRA delta added (W + s B A),
    computed aside: the trained module is never merged in place (no bf16 drift from unmerging)."""
    from peft.tuners.lora.layer import LoraLayer

    deepspeed = import_deepspeed()
    base = module.get_base_model()
    for name, param in base.named_parameters():
        if "lora_" in name:
            continue
        owner = base.get_submodule(name.rsplit(".", 2)[0]) if name.endswith(".base_layer.weight") else None
        layer = owner if isinstance(owner, LoraLayer) else None  # a LoRA layer wraps every base_layer
        with deepspeed.zero.GatheredParameters(list(layer.parameters()) if layer else [param]):
            weight = param.data if layer is None else with_deltas(layer, param.data)
            yield name.replace(".base_layer.", "."), weight


def with_deltas(layer: LoraLayer, weight: torch.Tensor) -> torch.Tensor:
    """`weight` with `layer`'s active LoRA deltas added (a new tensor when there are any)."""
    for adapter in layer.active_adapters:
        delta: torch.Tensor = layer.get_delta_weight(adapter)  # each of peft's LoRA layers defines it
        weight = weight + delta.to(weight.dtype)
    return weight


def push_weights(engine: RolloutEngine, module: torch.nn.Module) -> None:
    """After an optimizer step: wake the rollout engine's weights, load `module`'s (none when the engine
    generates with `module` itself), wake its KV cache; its policy version goes up."""
    engine.wake_up(("weights",))
    shared = getattr(engine, "model", None) is module
    engine.load_weights(None if shared else rollout_weights(module, engine.merged_weights))
    engine.wake_up(("kv_cache",))
