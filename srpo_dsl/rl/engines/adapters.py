"""LoRA adapters on one frozen base: several policies, one model in memory (peft named adapters).

A workflow's `policy NAME = adapter(BASE, ...)` policies become named adapters of one
`PeftModel` over BASE's weights. Every row goes through its own adapter: forwards run inside
`srpo_dsl.backends.routing.routed(names)` (one name per row, as peft's `adapter_names`;
`BASE_ADAPTER` is the base alone), so no adapter is ever "activated" and all of them stay
trainable in one engine. Each adapter's gradient
is clipped on its own (`clip_per_adapter`), as a separate model's would be, so an adapter's
update is the update it would get alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, pairwise
from types import MethodType
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from srpo_dsl.backends.routing import current_route
from srpo_dsl.lang.compile.graph import BASE_ADAPTER
from srpo_dsl.rl.distributed.ds_import import import_deepspeed

if TYPE_CHECKING:  # peft loads with a LoRA model
    from peft import LoraConfig
    from peft.tuners.lora.layer import Linear

__all__ = ["BASE_ADAPTER", "adapter_parameters", "clip_per_adapter", "with_adapters"]


def lora_config(options: Mapping[str, Any]) -> LoraConfig:
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
    any order stays correct, only slower. The rows' adapters come from `routed(names)` around the
    forward (or from peft's `adapter_names=`); the DSL's LoRA options build vanilla LoRA only."""
    from peft.tuners.lora.layer import Linear

    for module in model.modules():
        if isinstance(module, Linear):
            if module.lora_variant:
                raise ValueError("adapters route vanilla LoRA layers only (no DoRA or other variants)")
            module._mixed_batch_forward = MethodType(_block_forward, module)
            module.forward = MethodType(_routed_forward, module)


def _routed_forward(self: Linear, x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    """peft's forward, except inside `routed(names)`: then each row through its adapter (`_block_forward`)."""
    names = current_route()
    if names is None or self.disable_adapters or self.merged or "adapter_names" in kwargs:
        return type(self).forward(self, x, *args, **kwargs)
    return _block_forward(self, x, *args, adapter_names=names, **kwargs)


def _block_forward(
    self: Linear, x: torch.Tensor, *args: object, adapter_names: list[str], **kwargs: object
) -> torch.Tensor:
    """peft's `_mixed_batch_forward` (vanilla LoRA), over the runs of equal adapter names; without grad,
    with several adapters in the batch and no active dropout, all of them in two matmuls
    (`_stacked_delta`)."""
    kwargs.pop("alora_offsets", None)
    result: torch.Tensor = self.base_layer(x, *args, **kwargs)
    runs = [run for run in name_runs(adapter_names) if run[0] in self.lora_A]  # `__base__`: the base alone
    if not runs:
        return result
    mixed = len({name for name, _, _ in runs}) > 1
    if mixed and not torch.is_grad_enabled() and not any(_drops(self, name) for name, _, _ in runs):
        return result + _stacked_delta(self, x, runs).to(result.dtype)
    deltas = [(start, stop, _lora_delta(self, x, name, start, stop)) for name, start, stop in runs]
    if not torch.is_grad_enabled():
        for start, stop, delta in deltas:
            result[start:stop] += delta.to(result.dtype)
        return result
    return result + _row_concat(deltas, result).to(result.dtype)


def _lora_delta(layer: Linear, x: torch.Tensor, name: str, start: int, stop: int) -> torch.Tensor:
    """scaling * B(A(dropout(x))) of rows start:stop, by functional calls (no module dispatch); the
    scaling multiplies the rank-wide activations, the smallest tensor on the way."""
    a, b = _a_and_b(layer, name)
    rows = layer._cast_input_dtype(x[start:stop], a.weight.dtype)
    rows = layer.lora_dropout[name](rows) if _drops(layer, name) else rows
    return F.linear(F.linear(rows, a.weight, a.bias) * layer.scaling[name], b.weight, b.bias)


def _row_concat(deltas: list[tuple[int, int, torch.Tensor]], like: torch.Tensor) -> torch.Tensor:
    """The runs' deltas stacked over all rows of `like`, zeros where no adapter applies. With grad this
    beats adding into slices of the output in place, whose backward clones the whole gradient per run."""
    pieces, pos = [], 0
    for start, stop, delta in deltas:
        if start > pos:
            pieces.append(like.new_zeros(start - pos, *like.shape[1:]))
        pieces.append(delta)
        pos = stop
    if pos < like.shape[0]:
        pieces.append(like.new_zeros(like.shape[0] - pos, *like.shape[1:]))
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _a_and_b(layer: Linear, name: str) -> tuple[torch.nn.Linear, torch.nn.Linear]:
    """Adapter `name`'s A and B in `layer`: two `nn.Linear` in vanilla LoRA (`route_in_blocks` checked)."""
    a, b = layer.lora_A[name], layer.lora_B[name]
    if not (isinstance(a, torch.nn.Linear) and isinstance(b, torch.nn.Linear)):
        raise ValueError("adapters route vanilla LoRA layers only (no DoRA or other variants)")
    return a, b


def _drops(layer: Linear, name: str) -> bool:
    dropout = layer.lora_dropout[name]
    return dropout.training and not isinstance(dropout, torch.nn.Identity)


def _stacked_delta(layer: Linear, x: torch.Tensor, runs: list[tuple[str, int, int]]) -> torch.Tensor:
    """Every row's LoRA delta at once, without grad: ((x A_all^T) * select) B_all^T, all adapters' A
    stacked, each row's own rank slice kept and scaled by `select` (the other adapters' slices are
    exact zeros), then all B's. Two matmuls per layer whatever the adapter count, against six
    operations per adapter. (With grad, autograd would keep the stacks and the rank-wide
    activations of every layer: more memory than the blocks, for no faster update.)"""
    names = list(dict.fromkeys(name for name, _, _ in runs))
    pairs = [_a_and_b(layer, n) for n in names]
    stacked_a = torch.cat([a.weight for a, _ in pairs])  # [sum r, in]
    stacked_b = torch.cat([b.weight for _, b in pairs], dim=1)  # [out, sum r]
    hidden = F.linear(layer._cast_input_dtype(x, stacked_a.dtype), stacked_a)
    ranks = tuple((n, a.weight.shape[0], layer.scaling[n]) for n, (a, _) in zip(names, pairs))
    return F.linear(hidden * selection(ranks, runs, hidden), stacked_b)


_SELECT: dict[tuple[object, ...], torch.Tensor] = {}  # the last forward's selection masks (every layer reads
# the same)


def selection(
    ranks: tuple[tuple[str, int, float], ...], runs: list[tuple[str, int, int]], x: torch.Tensor
) -> torch.Tensor:
    """`[rows, 1.., sum r]` (shaped, placed and typed like `x`): row i's scaling over its adapter's rank
    slice, zeros elsewhere; built once per (adapter layout, row runs) and kept until they change."""
    key = (ranks, tuple(runs), x.shape[0], x.dim(), x.device, x.dtype)  # rows: base rows are not in runs
    if key not in _SELECT:
        offsets = dict(zip([n for n, _, _ in ranks], pairwise([0, *accumulate(r for _, r, _ in ranks)])))
        mask = torch.zeros(x.shape[0], offsets[ranks[-1][0]][1])
        scale = {n: s for n, _, s in ranks}
        for name, start, stop in runs:
            mask[start:stop, slice(*offsets[name])] = scale[name]
        _SELECT.clear()
        _SELECT[key] = mask.view(x.shape[0], *[1] * (x.dim() - 2), -1).to(x.device, x.dtype)
    return _SELECT[key]


@dataclass
class _LastRuns:
    """The last names and their runs (every layer of one forward gets the same)."""

    names: list[str] = field(default_factory=list)
    runs: tuple[tuple[str, int, int], ...] = ()


_RUNS = _LastRuns()


def name_runs(names: list[str]) -> tuple[tuple[str, int, int], ...]:
    """(name, start, stop) of each run of equal consecutive names; computed once per forward (comparing
    the lists runs in C, finding the runs in Python)."""
    if names != _RUNS.names:
        bounds = [0] + [i for i in range(1, len(names)) if names[i] != names[i - 1]] + [len(names)]
        _RUNS.names, _RUNS.runs = list(names), tuple((names[a], a, b) for a, b in pairwise(bounds))
    return _RUNS.runs


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
    import_deepspeed()
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
