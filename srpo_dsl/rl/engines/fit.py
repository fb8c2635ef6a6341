"""Will the policies fit on each GPU: their training state under the chosen ZeRO stage, checked before
any weight is loaded, so a model too large for the stage is one clear line instead of an
out-of-memory error minutes into loading.

Per GPU, with bf16 weights and gradients and fp32 master weights plus two Adam moments (the
mixed-precision layout DeepSpeed uses on CUDA): weights 2 bytes per parameter (split over the
ranks under ZeRO-3), gradients 2 per trainable parameter (split from ZeRO-2), optimizer state
12 per trainable parameter (split from ZeRO-1; none on the GPU when offloaded). As the rollout
engine's entry declares (`RolloutEngineKind`): one that generates with the trainer's module (`hf`)
adds a full bf16 copy under ZeRO-3 (it cannot generate from shards) and keeps frozen policies on the
GPU; one that reserves a GPU share (`vllm`: `vllm_memory_share`) holds frozen policies in it. With `kl > 0`
every trained model (in full or `lora(...)`) keeps a frozen reference copy of its initial weights
on the GPU, 2 bytes per parameter at every stage (adapters score their reference through the base
they share, no copy). LoRA and adapter parameters are left out of the trainable count (a few percent
at most).

Activations are counted when the micro-batches have a token budget (`max_tokens_per_micro_batch`: no
micro-batch forwards more tokens, padding included): per token, 34 bytes per hidden unit in each layer
(bf16, attention without the score matrix, as flash and SDPA kernels run it; Korthikanti et al. 2022,
"Reducing activation recomputation in large transformer models", Table 2), or with gradient
checkpointing each layer's 2-byte input plus one layer's 34; and the logits with their gradient, 4
bytes per vocabulary entry, except where the head is applied a chunk of tokens at a time
(`backends.chunked_head`, the `PLAIN_HEADS` architectures): then a fixed `HEAD_SCRATCH` per forward,
one chunk's logits, their float32 copy and their gradient. Every trained model's forward of a
micro-batch is alive at its backward, but their rows share the budget: the costliest model's
activations for the budget. Without a budget the longest micro-batch is not known before the
rollouts, activations are left out, and the check is a lower bound.

What the training state leaves is where the `hf` engine decodes: its kept static caches are capped at
`DECODE_CACHE_SHARE` of it (`decode_cache_cap`), the rest left to the prefill, the logits and the
allocator.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from srpo_dsl.backends.chunked_head import PLAIN_HEADS
from srpo_dsl.backends.logprobs import PickedLogprobs
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.registries import RolloutEngineKind

WEIGHT, GRAD, OPTIMIZER = 2, 2, 12  # bytes per parameter (see above)
LAYER_ACTIVATION, LAYER_INPUT, LOGIT = (
    34,
    2,
    4,
)  # bytes per token: per hidden unit in a layer; per vocab entry
HEAD_SCRATCH = 3 * PickedLogprobs.CHUNK_BYTES  # the chunked head's one chunk: logits, float32 copy, gradient
ACTIVATIONS = "micro-batch activations"  # its line in `needed_bytes`
DECODE_CACHE_SHARE = 0.5  # of the memory the training state leaves: the `hf` engine's kept decode caches


def vllm_memory_share() -> float:
    """The fraction of each GPU a colocated vLLM engine takes: SRPO_DSL_VLLM_MEMORY, default 0.3."""
    return float(os.environ.get("SRPO_DSL_VLLM_MEMORY", "0.3"))


@dataclass(frozen=True)
class MemoryLayout:
    """How the training state is spread: ZeRO stage, ranks, CPU offload, and the rollout engine's
    capabilities (whether it generates with the trained module, whether it keeps a GPU share)."""

    zero: int
    world_size: int
    offload: str  # none | optimizer | params | all
    engine: RolloutEngineKind
    reference: bool = False  # kl > 0: each trained model's frozen reference copy
    tokens: int | None = None  # the micro-batch token budget (None: activations not counted)
    checkpointing: bool = False  # gradient checkpointing: one layer's activations, the others' inputs


@dataclass(frozen=True)
class ModelShape:
    """What a model's activations scale with, from its config."""

    hidden: int
    layers: int
    vocab: int
    chunked_head: bool = False  # its head applied a chunk of tokens at a time (`PLAIN_HEADS`)

    def token_bytes(self, checkpointing: bool) -> float:
        """Activation bytes per token of a forward kept for its backward (see the module's docstring)."""
        if checkpointing:
            layers = LAYER_INPUT * self.hidden * self.layers + LAYER_ACTIVATION * self.hidden
        else:
            layers = LAYER_ACTIVATION * self.hidden * self.layers
        return float(layers + (0 if self.chunked_head else LOGIT * self.vocab))

    def activation_bytes(self, tokens: int, checkpointing: bool) -> float:
        """A forward of `tokens` tokens kept for its backward, the chunked head's scratch included."""
        return tokens * self.token_bytes(checkpointing) + (HEAD_SCRATCH if self.chunked_head else 0.0)


def training_bytes(params: int, trainable: int, layout: MemoryLayout) -> float:
    """Lower bound on one GPU's memory for a model in a DeepSpeed engine: `params` parameters,
    `trainable` of them trained."""
    split = layout.world_size
    weights = WEIGHT * params / (split if layout.zero == 3 else 1)
    if layout.offload in ("params", "all"):
        weights = 0.0
    grads = GRAD * trainable / (split if layout.zero >= 2 else 1)
    optimizer = OPTIMIZER * trainable / (split if layout.zero >= 1 else 1)
    if layout.offload in ("optimizer", "all"):
        optimizer = 0.0
    rollout_copy = WEIGHT * params if layout.zero == 3 and layout.engine.generates_with_module else 0.0
    return weights + grads + optimizer + rollout_copy


def parameter_count(model_path: str) -> int:
    """The model's parameter count from its config alone (built on the meta device)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    return sum(p.numel() for p in model.parameters())


def model_shape(model_path: str) -> ModelShape:
    """Hidden size, layer count and vocabulary of the model at `model_path`, from its config."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    chunked = getattr(config, "model_type", None) in PLAIN_HEADS
    text = config.get_text_config()
    return ModelShape(text.hidden_size, text.num_hidden_layers, text.vocab_size, chunked)


def needed_bytes(graph: EventGraph, paths: Mapping[str, str], layout: MemoryLayout) -> dict[str, float]:
    """Each loaded model's lower bound (adapters live in their base's model, counted once there)."""
    hosts = {p.base for p in graph.policies.values() if p.base is not None}
    out = {}
    for name, spec in graph.policies.items():
        if spec.base is not None:
            continue
        params = parameter_count(paths[name])
        if not spec.trainable and name not in hosts:  # frozen: a plain module (else in the engine's share)
            out[name] = float(WEIGHT * params) if layout.engine.generates_with_module else 0.0
            continue
        trainable = params if spec.trainable and not spec.lora else 0
        reference = WEIGHT * params if layout.reference and spec.trainable else 0.0
        out[name] = training_bytes(params, trainable, layout) + reference
    if layout.tokens is not None:
        trained = {paths[n] for n, p in graph.policies.items() if p.trainable and p.base is None}
        trained |= {paths[p.base] for p in graph.policies.values() if p.base is not None and p.trainable}
        out[ACTIVATIONS] = max(
            (model_shape(path).activation_bytes(layout.tokens, layout.checkpointing) for path in trained),
            default=0.0,
        )
    return out


def fit_problem(needed: Mapping[str, float], available: float, layout: MemoryLayout) -> str | None:
    """The one-line reason the policies cannot fit in `available` bytes per GPU, or None."""
    total = sum(needed.values())
    if total <= available:
        return None
    largest = max(needed, key=needed.__getitem__)
    gib = {name: f"{value / 2**30:.1f}" for name, value in {**needed, "": total, " ": available}.items()}
    parts = ["weights", "gradients", "optimizer states"]
    parts += ["KL reference copies"] if layout.reference else []
    parts += ["the activations of a micro-batch"] if layout.tokens is not None else []
    state = ", ".join(parts[:-1]) + " and " + parts[-1]
    return (
        f"the policies' {state} need at least {gib['']} GiB per GPU under "
        f"ZeRO-{layout.zero} on {layout.world_size} GPU(s) (`{largest}` alone {gib[largest]} GiB), more "
        f"than the {gib[' ']} GiB of the GPU left for training: use --zero 3 on more GPUs, --offload "
        "optimizer (or all with --zero 3), or a lora(...) or adapter(...) policy"
        + (", a smaller max_tokens_per_micro_batch or gradient_checkpointing" if layout.tokens else "")
    )


def decode_cache_cap(
    graph: EventGraph, paths: Mapping[str, str], layout: MemoryLayout, device: torch.device
) -> float | None:
    """On CUDA, the bytes the rollout engines that keep static decode caches may keep between calls
    (`srpo_dsl.backends.decoding`): `DECODE_CACHE_SHARE` of what the training state (`needed_bytes`)
    leaves of this GPU; None on CPU (nothing capped) and for an engine keeping its own share (vLLM)."""
    if device.type != "cuda" or layout.engine.reserves_gpu_share:
        return None
    return cache_cap(needed_bytes(graph, paths, layout), torch.cuda.mem_get_info(device)[1])


def cache_cap(needed: Mapping[str, float], total: float) -> float:
    """`DECODE_CACHE_SHARE` of the `total` bytes the `needed` training state leaves (0 if it leaves none)."""
    return DECODE_CACHE_SHARE * max(total - sum(needed.values()), 0.0)


def check_fit(
    graph: EventGraph, paths: Mapping[str, str], layout: MemoryLayout, device: torch.device
) -> str | None:
    """On CUDA, `fit_problem` against this GPU's memory less the rollout engine's share, if it keeps one
    (None on CPU: nothing to check)."""
    if device.type != "cuda":
        return None
    available = torch.cuda.mem_get_info(device)[1] * (
        1 - vllm_memory_share() if layout.engine.reserves_gpu_share else 1
    )
    return fit_problem(needed_bytes(graph, paths, layout), available, layout)
