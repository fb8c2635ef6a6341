"""DeepSpeed engines: their config, their construction over a module, their optimizer step.

The config is built from the workflow's `train` options (ZeRO stage, offload, bf16 on CUDA /
fp32 on CPU, gradient clipping, linear LR warm-up, `gradient_accumulation_steps` =
micro-batches) and merged with the user's JSON overrides (`--ds-config`). deepspeed itself is
imported only where an engine is built, after `process_group.init_distributed`. `TrainEngine` names
what the trainer, its checkpoints and its weight pushes use of an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import torch

from srpo_dsl.choices import OFFLOAD
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.rl.distributed.ds_import import import_deepspeed

if TYPE_CHECKING:
    from deepspeed.runtime.engine import DeepSpeedEngine


class TrainEngine(Protocol):
    """The DeepSpeed engine of a trainable policy, as the trainer drives it (`update`), checkpoints it
    (`checkpoint`) and reads its module (weight pushes, the `hf` rollout module): each member one of
    `deepspeed.runtime.engine.DeepSpeedEngine`'s, with the parameters passed here. DeepSpeed's engine is
    also a `torch.nn.Module` whose forward is its module's: a policy scores rows through it."""

    module: torch.nn.Module  # the model it trains (a peft model under LoRA or adapters)
    dp_world_size: int  # the ranks it averages gradients over
    enable_backward_allreduce: bool  # False: its backward leaves the gradients unreduced

    def backward(self, loss: torch.Tensor, *, scale_wrt_gas: bool = True) -> torch.Tensor: ...
    def step(self) -> None: ...
    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None: ...
    def was_step_applied(self) -> bool: ...
    def get_global_grad_norm(self) -> float | None: ...
    def get_lr(self) -> list[float]: ...
    def zero_optimization_stage(self) -> int: ...
    def bfloat16_enabled(self) -> bool: ...
    def fp16_enabled(self) -> bool: ...
    def save_checkpoint(self, save_dir: str, tag: str | None = None, *, save_latest: bool = True) -> bool: ...
    def load_checkpoint(
        self, load_dir: str, tag: str | None = None
    ) -> tuple[str | None, dict[str, object] | None]: ...


if TYPE_CHECKING:  # mypy checks DeepSpeed's engine against the Protocol (pyproject.toml: it reads it)

    def _deepspeed_engine_is_a_train_engine(engine: DeepSpeedEngine) -> TrainEngine:
        return engine


def merge(base: Mapping[str, object], override: Mapping[str, object]) -> dict[str, object]:
    """Recursive dict merge: `override` wins, nested dicts are merged key by key."""
    out = dict(base)
    for key, value in override.items():
        mine = out.get(key)
        out[key] = merge(mine, value) if isinstance(value, Mapping) and isinstance(mine, Mapping) else value
    return out


def ds_config(
    opts: TrainOptions,
    *,
    device: str,
    world_size: int,
    offload: str = "none",
    user: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The DeepSpeed config of one engine; `user` keys override the package's."""
    if offload not in OFFLOAD:
        raise ValueError(f"offload must be one of {', '.join(OFFLOAD)}, got {offload!r}")
    if offload in ("params", "all") and opts.zero != 3:
        raise ValueError("parameter offload needs ZeRO stage 3 (--zero 3)")
    if offload != "none" and opts.zero == 0:
        raise ValueError("optimizer offload needs ZeRO stage 1, 2 or 3")
    zero: dict[str, object] = {"stage": opts.zero}
    if device == "cpu":
        zero["stage3_param_persistence_threshold"] = 0  # else a tiny model is never partitioned
    if offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": device == "cuda"}
    if offload in ("params", "all"):
        zero["offload_param"] = {"device": "cpu", "pin_memory": device == "cuda"}
    base: dict[str, object] = {
        "train_micro_batch_size_per_gpu": 1,  # nominal: a micro-batch is a set of whole events
        "gradient_accumulation_steps": opts.micro_batches,
        "train_batch_size": opts.micro_batches * world_size,
        "gradient_clipping": opts.grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": device == "cuda"},
        "zero_allow_untested_optimizer": True,  # torch AdamW (DeepSpeedCPUAdam compiles for minutes)
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    config = merge(base, user or {})
    if config["gradient_accumulation_steps"] != opts.micro_batches:
        raise ValueError(
            "set micro-batches with --micro-batches, not gradient_accumulation_steps in the config"
        )
    steps, micro = config["gradient_accumulation_steps"], config["train_micro_batch_size_per_gpu"]
    if isinstance(steps, int | float) and isinstance(micro, int | float):  # else DeepSpeed refuses them
        config["train_batch_size"] = steps * micro * world_size
    return config


def warmup_schedule(warmup: int) -> Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LambdaLR]:
    """LR factor min(1, (s + 1) / (warmup + 1)) at optimizer step s: linear warm-up, then constant."""
    return lambda optimizer: torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / (warmup + 1))
    )


class EngineConfigError(Exception):
    """A DeepSpeed config that DeepSpeed refuses when it builds an engine; the message is one line."""


def build_engine(model: torch.nn.Module, opts: TrainOptions, config: Mapping[str, object]) -> TrainEngine:
    """A DeepSpeed engine over `model`'s trainable parameters."""
    deepspeed = import_deepspeed()

    params = [p for p in model.parameters() if p.requires_grad]
    # torch AdamW unless the user's config names one of DeepSpeed's optimizers
    optimizer = None if "optimizer" in config else torch.optim.AdamW(params, lr=opts.lr, weight_decay=0.0)
    scheduler = None if "scheduler" in config else warmup_schedule(opts.warmup)
    engine: TrainEngine  # a DeepSpeedEngine: deepspeed's module is imported at run time, untyped
    try:
        engine, *_ = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            model_parameters=params,
            lr_scheduler=scheduler,
            config=dict(config),
        )
    except (AssertionError, ValueError, TypeError, KeyError) as exc:  # DeepSpeed's own checks of the config
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise EngineConfigError(f"DeepSpeed cannot build an engine from this config: {reason}") from None
    engine.module.eval()  # dropout off: recomputed old log-probs equal the update's at the first epoch
    plain = not (engine.bfloat16_enabled() or engine.fp16_enabled())  # no DeepSpeed optimizer wrapper
    if plain and engine.zero_optimization_stage() == 0 and engine.dp_world_size == 1:
        # DeepSpeed would still flatten every gradient into one buffer and "average" it over one rank:
        # a transient copy of all the trainable gradients per step, for nothing (bf16/fp16 engines
        # keep DeepSpeed's path: their optimizer wrappers, unrun here, take part in it)
        engine.enable_backward_allreduce = False
    return engine


def norm_before_step(engine: TrainEngine) -> float | None:
    """The gradient norm before clipping where DeepSpeed reports none (ZeRO stage 0 in fp32: it would
    apply a step whose gradient is not finite), computed before the step; None: `norm_after_step`."""
    if engine.zero_optimization_stage() != 0 or engine.bfloat16_enabled():
        return None
    grads = [p.grad.float().norm() for p in engine.module.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(grads))) if grads else 0.0


def norm_after_step(engine: TrainEngine) -> float:
    """DeepSpeed's gradient norm of the step it just took (inf: it skipped a step whose gradient was not
    finite, as its ZeRO optimizers do)."""
    return float(engine.get_global_grad_norm() or 0.0)
