"""LoRA adapters on one frozen base: several policies, one model in memory (peft named adapters).

A workflow's `policy NAME = adapter(BASE, ...)` policies become named adapters of one
`PeftModel` over BASE's weights. Every row goes through its own adapter: forwards pass
peft's `adapter_names` (one name per row; `BASE_ADAPTER` is the base alone), so no adapter
is ever "activated" and all of them stay trainable in one engine. Each adapter's gradient
is clipped on its own (`clip_per_adapter`), as a separate model's would be, so an adapter's
update is the update it would get alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from itertools import pairwise
from types import MethodType
from typing import Any

import torch

from srpo_dsl.lang.graph import BASE_ADAPTER

__all__ = ["BASE_ADAPTER", "adapter_parameters", "clip_per_adapter", "with_adapters"]


def lora_config(options: Mapping[str, Any]) -> Any:
    """peft's LoraConfig of a workflow's LoRA options; `targets` is `all-linear` or module names,
    comma-separated (`"q_proj,v_proj"`)."""
    from peft import LoraConfig

    targets = options["targets"]
    if isinstance(targets, str) and targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    return LoraConfig(
        r=options["r"],
        lora_alpha=options["alpha"],
        lora_dropout=options["dropout"],
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def with_adapters(model: torch.nn.Module, adapters: Mapping[str, Mapping[str, Any]]) -> torch.nn.Module:
    """`model` (frozen) wrapped in a PeftModel with one trainable LoRA adapter per entry."""
    from peft import get_peft_model

    names = list(adapters)
    peft_model = get_peft_model(model, lora_config(adapters[names[0]]), adapter_name=names[0])
    for name in names[1:]:
        peft_model.add_adapter(name, lora_config(adapters[name]))
    for name in names:  # peft leaves only the active adapter trainable: all of them train here
        for p in adapter_parameters(peft_model, name):
            p.requires_grad_(True)
    route_in_blocks(peft_model)
    return peft_model


def route_in_blocks(model: torch.nn.Module) -> None:
    """Route mixed-adapter batches by blocks of rows: each LoRA linear adds adapter k's output to the slice
    of rows that use it (a view), instead of peft's per-layer Python lists of row indices and gathered
    copies. Callers put each adapter's rows next to each other (the backend and the update sort them);
    any order stays correct, only slower. Layers with a LoRA variant (DoRA, ...) keep peft's routing."""
    from peft.tuners.lora.layer import Linear

    for module in model.modules():
        if isinstance(module, Linear) and not module.lora_variant:
            module._mixed_batch_forward = MethodType(_block_forward, module)


def _block_forward(self: Any, x: torch.Tensor, *args: Any, adapter_names: list[str], **kwargs: Any) -> Any:
    """peft's `_mixed_batch_forward` (vanilla LoRA), over the runs of equal adapter names."""
    kwargs.pop("alora_offsets", None)
    result = self.base_layer(x, *args, **kwargs)
    for name, start, stop in name_runs(adapter_names):
        if name not in self.lora_A:  # `__base__`: the base alone
            continue
        rows = self._cast_input_dtype(x[start:stop], self.lora_A[name].weight.dtype)
        delta = self.lora_B[name](self.lora_A[name](self.lora_dropout[name](rows))) * self.scaling[name]
        result[start:stop] += delta.to(result.dtype)
    return result


_RUNS: list[Any] = [[], ()]  # the last names and their runs (every layer of one forward gets the same)


def name_runs(names: list[str]) -> tuple[tuple[str, int, int], ...]:
    """(name, start, stop) of each run of equal consecutive names; computed once per forward (comparing
    the lists runs in C, finding the runs in Python)."""
    if names != _RUNS[0]:
        bounds = [0] + [i for i in range(1, len(names)) if names[i] != names[i - 1]] + [len(names)]
        _RUNS[0], _RUNS[1] = list(names), tuple((names[a], a, b) for a, b in pairwise(bounds))
    return _RUNS[1]


def adapter_parameters(model: torch.nn.Module, name: str) -> list[torch.nn.Parameter]:
    """The LoRA parameters of adapter `name` (`...lora_A.NAME.weight`, `...lora_B.NAME.weight`, ...)."""
    pattern = re.compile(rf"\.lora_\w+\.{re.escape(name)}\.")
    return [p for n, p in model.named_parameters() if pattern.search(n)]


def clip_per_adapter(module: torch.nn.Module, names: Sequence[str], max_norm: float) -> float:
    """Clip each adapter's gradient to `max_norm` on its own (after the last backward, before the
    step; collective under ZeRO); returns the norm over all of them, before clipping.

    The coefficient is DeepSpeed's, `max_norm / (norm + 1e-6)` when below 1, so one adapter is
    clipped exactly as the same LoRA alone in an engine of its own.
    """
    from deepspeed.utils import safe_get_full_grad, safe_set_full_grad

    total = 0.0
    for name in names:
        params = adapter_parameters(module, name)
        grads = [safe_get_full_grad(p) for p in params]
        norm = math.sqrt(sum(float(g.float().pow(2).sum()) for g in grads if g is not None))
        total += norm**2
        coef = max_norm / (norm + 1e-6)
        if coef < 1.0:
            for p, g in zip(params, grads):
                if g is not None:
                    safe_set_full_grad(p, g * coef)
    return math.sqrt(total)


def trainable_parameters(model_path: str, adapters: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Each adapter's parameter count on the base at `model_path`, built on the meta device (no weights
    are read: only the model's config, which must be on this machine)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path, local_files_only=True)
    with torch.device("meta"):
        model = with_adapters(AutoModelForCausalLM.from_config(config), adapters)
    return {name: sum(p.numel() for p in adapter_parameters(model, name)) for name in adapters}
