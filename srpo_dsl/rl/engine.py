"""DeepSpeed engines (one per trainable policy) and the rollout engines that generate for them.

A shared policy (LLM-sharing) is one engine; non-sharing workflows declare one policy per
role, hence one engine per role. Frozen policies get no engine: a plain eval module.
Each policy generates through a rollout engine (`RolloutEngine`: `hf` or `vllm`). The `hf`
engine shares the trained module, except under ZeRO-3 where the module is partitioned: it
then generates with a full copy, so generation runs no collectives and ranks may generate
different numbers of tokens, or nothing. `vllm` holds its own copy, colocated on the GPU.
After every optimizer step `push_weights` wakes the engine, streams the new weights into it
(one parameter at a time, gathered under ZeRO-3) and bumps its policy version.

The DeepSpeed config is built here from the workflow's `train` options (ZeRO stage,
offload, bf16 on CUDA / fp32 on CPU, gradient clipping, linear LR warm-up,
`gradient_accumulation_steps` = micro-batches) and merged with the user's JSON overrides.
One process runs without a launcher (`init_distributed` fills in the rendezvous
variables); under `deepspeed`/`torchrun` the launcher's variables are used (gloo on CPU,
nccl on GPU).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import socket
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from srpo_dsl.backends.base import BackendError, RolloutEngine
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.lang.checker import PolicyInfo
from srpo_dsl.lang.graph import BASE_ADAPTER, EventGraph
from srpo_dsl.lang.schema import TrainOptions
from srpo_dsl.rl.adapters import lora_config, with_adapters
from srpo_dsl.rl.data_order import seed_of
from srpo_dsl.rl.names import OFFLOAD


@dataclass(frozen=True)
class Dist:
    """This process's place in the data-parallel group."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device


@dataclass(frozen=True)
class Rollout:
    """How a run generates: the rollout engine (`hf`, or `vllm` colocated on the GPU) and the `hf`
    engine's decode loop (`srpo_dsl.backends.decoding`)."""

    engine: str = "hf"
    decode: str = "auto"


@dataclass
class Policy:
    """A policy's module, its rollout backend and, when trainable, its engine (None when frozen).

    Policies on one shared base (adapters, and the base itself) share its module, backend and
    engine: `adapter` is the peft adapter their rows go through, `owner` the policy whose name
    the engine is saved under, `adapters` every adapter the engine trains.
    """

    name: str
    module: torch.nn.Module
    backend: RolloutEngine
    engine: Any = None  # deepspeed.DeepSpeedEngine
    reference: Any = None  # frozen initial weights, for the KL penalty (an adapter's: the shared module)
    adapter: str | None = None
    owner: str = ""
    adapters: tuple[str, ...] = ()

    @property
    def model(self) -> torch.nn.Module:
        """The forward entry point: the engine when trainable (ZeRO hooks), else the module."""
        return self.engine if self.engine is not None else self.module

    @property
    def engine_owner(self) -> str:
        return self.owner or self.name

    @property
    def pad_id(self) -> int:
        return self.backend.pad_id


def all_reduce(values: Sequence[float], device: torch.device) -> list[float]:
    """Element-wise sum over ranks (the values themselves with one process)."""
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(t)
    return t.tolist()


def barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device: str) -> Dist:
    """Join (or, alone, create) the process group, destroyed at exit (`destroy_distributed`); call before
    anything imports deepspeed."""
    if device == "cpu":
        os.environ["DS_ACCELERATOR"] = "cpu"
    os.environ.setdefault(
        "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "srpo-dsl" / "torch_extensions")
    )
    if "RANK" not in os.environ:  # no launcher: a group of one
        os.environ.update(
            RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
        )
    import deepspeed
    import deepspeed.ops

    if os.environ["WORLD_SIZE"] == "1":  # alone there is nothing to all-reduce: skip the shared-memory
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # op (its first build takes ~1 min)

    warnings.filterwarnings(
        "ignore", category=FutureWarning, module="torch.distributed"
    )  # from ZeRO's internals
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo" if device == "cpu" else "nccl", verbose=False)
        atexit.register(destroy_distributed)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    return Dist(
        torch.distributed.get_rank(),
        local_rank,
        torch.distributed.get_world_size(),
        torch.device("cuda", local_rank) if device == "cuda" else torch.device("cpu"),
    )


def destroy_distributed() -> None:
    """Destroy the process groups `init_distributed` created, at exit while the interpreter is whole.

    A gloo group's worker thread may still hold a finished collective (its tensors, a completion
    callback) after its caller has moved on; left to interpreter finalization, that thread takes the
    GIL, is ended mid-destructor, and the process aborts ("terminate called without an active
    exception"). Destroying the groups (DeepSpeed's references too) and collecting the objects that
    still hold one (engines are reference cycles) joins those threads first."""
    if torch.distributed.is_initialized():
        import deepspeed.comm

        deepspeed.comm.destroy_process_group()
    gc.collect()


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge: `override` wins, nested dicts are merged key by key."""
    out = dict(base)
    for key, value in override.items():
        out[key] = (
            merge(out[key], value)
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
            else value
        )
    return out


def read_ds_config(path: Path) -> dict[str, Any]:
    """User overrides from a JSON file (ValueError with a one-line reason)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"cannot read {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a DeepSpeed config must be a JSON object")
    return data


def ds_config(
    opts: TrainOptions,
    *,
    device: str,
    world_size: int,
    offload: str = "none",
    user: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The DeepSpeed config of one engine; `user` keys override the package's."""
    if offload not in OFFLOAD:
        raise ValueError(f"offload must be one of {', '.join(OFFLOAD)}, got {offload!r}")
    if offload in ("params", "all") and opts.zero != 3:
        raise ValueError("parameter offload needs ZeRO stage 3 (--zero 3)")
    if offload != "none" and opts.zero == 0:
        raise ValueError("optimizer offload needs ZeRO stage 1, 2 or 3")
    zero: dict[str, Any] = {"stage": opts.zero}
    if device == "cpu":
        zero["stage3_param_persistence_threshold"] = 0  # else a tiny model is never partitioned
    if offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": device == "cuda"}
    if offload in ("params", "all"):
        zero["offload_param"] = {"device": "cpu", "pin_memory": device == "cuda"}
    base = {
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
    config["train_batch_size"] = (
        config["gradient_accumulation_steps"] * config["train_micro_batch_size_per_gpu"] * world_size
    )
    return config


def warmup_schedule(warmup: int):
    """LR factor min(1, (s + 1) / (warmup + 1)) at optimizer step s: linear warm-up, then constant."""
    return lambda optimizer: torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / (warmup + 1))
    )


def _load(path: str, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype), AutoTokenizer.from_pretrained(path)


def _with_lora(model: torch.nn.Module, lora: Mapping[str, Any]) -> torch.nn.Module:
    from peft import get_peft_model

    return get_peft_model(model, lora_config(lora))


def _dtype(dist: Dist) -> torch.dtype:
    return torch.bfloat16 if dist.device.type == "cuda" else torch.float32


def build_policies(
    graph: EventGraph,
    paths: Mapping[str, str],
    opts: TrainOptions,
    dist: Dist,
    config: Mapping[str, Any],
    rollout: Rollout = Rollout(),
) -> dict[str, Policy]:
    """Every policy of the workflow: one engine per trainable policy, one per base that hosts adapters;
    `rollout` says how they generate."""
    hosts = list(dict.fromkeys(p.base for p in graph.policies.values() if p.base is not None))
    if hosts and rollout.engine != "hf":
        raise BackendError(
            f"--backend {rollout.engine}: adapter(...) policies generate with the hf backend only"
        )
    out: dict[str, Policy] = {}
    for name, spec in graph.policies.items():
        if spec.base is None and name not in hosts:
            torch.manual_seed(seed_of("init", opts.seed, name))  # LoRA weights: the run's seed, per engine
            out[name] = build_policy(name, paths[name], spec, opts, dist, config, rollout)
    for base in hosts:
        torch.manual_seed(seed_of("init", opts.seed, base))
        out |= build_adapter_group(graph, base, paths[base], opts, dist, config, rollout.decode)
    return {name: out[name] for name in graph.policies}


def build_policy(
    name: str,
    path: str,
    spec: PolicyInfo,
    opts: TrainOptions,
    dist: Dist,
    config: Mapping[str, Any],
    rollout: Rollout = Rollout(),
) -> Policy:
    """Load `path`; trainable: (LoRA,) AdamW and a DeepSpeed engine from `config`; frozen: an eval module."""
    model, tokenizer = _load(path, _dtype(dist))
    if not spec.trainable:  # under vllm the engine holds the weights on the GPU: the module stays here
        model.to(dist.device if rollout.engine == "hf" else "cpu").eval().requires_grad_(False)
        return Policy(name, model, rollout_engine(rollout, model, tokenizer, path, dist))
    reference = None
    if opts.kl > 0:
        reference = _load(path, _dtype(dist))[0].to(dist.device).eval().requires_grad_(False)
    wrap = (lambda m: _with_lora(m, spec.lora)) if spec.lora else (lambda m: m)
    engine = _engine(wrap(model), opts, config)
    module = None if rollout.engine == "vllm" else hf_rollout_module(engine, path, wrap, dist)
    backend = rollout_engine(rollout, module, tokenizer, path, dist)
    return Policy(name, engine.module, backend, engine, reference)


def rollout_engine(rollout: Rollout, module: Any, tokenizer: Any, path: str, dist: Dist) -> RolloutEngine:
    """`vllm` loading `path` itself, or `hf` generating with `module`."""
    if rollout.engine == "vllm":
        return vllm_engine(path, dist)
    return HFBackend(module, tokenizer=tokenizer, decode=rollout.decode)


def build_adapter_group(
    graph: EventGraph,
    base: str,
    path: str,
    opts: TrainOptions,
    dist: Dist,
    config: Mapping[str, Any],
    decode: str = "auto",
) -> dict[str, Policy]:
    """The frozen `base` and its adapter policies: one model in memory, one engine training every adapter
    (each clipped on its own, so DeepSpeed's clipping is off), one backend generating for all of them."""
    adapters = graph.adapters_on(base)
    model, tokenizer = _load(path, _dtype(dist))
    model.requires_grad_(False)
    wrap = lambda m: with_adapters(m, adapters)  # noqa: E731
    engine = _engine(wrap(model), opts, {**config, "gradient_clipping": 0.0})
    backend = HFBackend(hf_rollout_module(engine, path, wrap, dist), tokenizer=tokenizer, decode=decode)
    reference = engine.module if opts.kl > 0 else None  # scored without adapters: the base
    group = {base: Policy(base, engine.module, backend, adapter=BASE_ADAPTER, owner=base)}
    for name, adapter in graph.adapters.items():
        if graph.policies[name].base == base:
            group[name] = Policy(
                name, engine.module, backend, engine, reference, adapter, base, tuple(adapters)
            )
    return group


def _engine(model: torch.nn.Module, opts: TrainOptions, config: Mapping[str, Any]) -> Any:
    """A DeepSpeed engine over `model`'s trainable parameters."""
    import deepspeed

    params = [p for p in model.parameters() if p.requires_grad]
    # torch AdamW unless the user's config names one of DeepSpeed's optimizers
    optimizer = None if "optimizer" in config else torch.optim.AdamW(params, lr=opts.lr, weight_decay=0.0)
    scheduler = None if "scheduler" in config else warmup_schedule(opts.warmup)
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, model_parameters=params, lr_scheduler=scheduler, config=dict(config)
    )
    engine.module.eval()  # dropout off: recomputed old log-probs equal the update's at the first epoch
    plain = not (engine.bfloat16_enabled() or engine.fp16_enabled())  # no DeepSpeed optimizer wrapper
    if plain and engine.zero_optimization_stage() == 0 and engine.dp_world_size == 1:
        # DeepSpeed would still flatten every gradient into one buffer and "average" it over one rank:
        # a transient copy of all the trainable gradients per step, for nothing (bf16/fp16 engines
        # keep DeepSpeed's path: their optimizer wrappers, unrun here, take part in it)
        engine.enable_backward_allreduce = False
    return engine


def hf_rollout_module(engine: Any, path: str, wrap: Any, dist: Dist) -> torch.nn.Module:
    """The module the `hf` engine generates with: the engine's own, or under ZeRO-3 a full copy."""
    if engine.zero_optimization_stage() != 3:
        return engine.module
    rollout = wrap(_load(path, _dtype(dist))[0]).to(dist.device)
    with full_state(engine.module) as state:
        rollout.load_state_dict(state)
    return rollout.eval().requires_grad_(False)


def vllm_engine(path: str, dist: Dist) -> RolloutEngine:
    """A colocated `vllm.LLM` on this rank's GPU: sleep mode on; under a launcher one engine per rank
    (`external_launcher`). Its share of GPU memory: SRPO_DSL_VLLM_MEMORY (default 0.3)."""
    from srpo_dsl.backends.vllm import VLLMBackend
    from srpo_dsl.rl.fit import vllm_memory_share

    launched = dist.world_size > 1
    return VLLMBackend(
        path,
        dtype="bfloat16",
        gpu_memory_utilization=vllm_memory_share(),
        enable_sleep_mode=True,
        seed=dist.rank,
        **({"distributed_executor_backend": "external_launcher"} if launched else {}),
    )


@contextmanager
def full_state(module: torch.nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """The module's full state dict for the duration (gathered under ZeRO-3: collective)."""
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(module.parameters())):
        yield module.state_dict()


def rollout_weights(module: torch.nn.Module, merged: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """Each parameter's full tensor, one at a time (gathered under ZeRO-3: collective, so every rank
    iterates); with `merged`, a LoRA model's weights folded into the base model's names."""
    import deepspeed

    if merged and hasattr(module, "peft_config"):
        yield from merged_lora_weights(module)
        return
    for name, param in module.named_parameters():
        with deepspeed.zero.GatheredParameters([param]):
            yield name, param.data


def merged_lora_weights(module: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's parameters under its own names with each active LoRA delta added (W + s B A),
    computed aside: the trained module is never merged in place (no bf16 drift from unmerging)."""
    import deepspeed

    base = module.get_base_model()
    for name, param in base.named_parameters():
        if "lora_" in name:
            continue
        layer = base.get_submodule(name.rsplit(".", 2)[0]) if name.endswith(".base_layer.weight") else None
        with deepspeed.zero.GatheredParameters(list(layer.parameters()) if layer else [param]):
            weight = param.data
            for adapter in layer.active_adapters if layer else []:
                weight = weight + layer.get_delta_weight(adapter).to(weight.dtype)
            yield name.replace(".base_layer.", "."), weight


def push_weights(policy: Policy) -> None:
    """After an optimizer step: wake the rollout engine's weights, load the new ones (none when it
    generates with the trained module itself), wake its KV cache; its policy version goes up."""
    engine = policy.backend
    engine.wake_up(("weights",))
    shared = getattr(engine, "model", None) is policy.module
    engine.load_weights(None if shared else rollout_weights(policy.module, engine.merged_weights))
    engine.wake_up(("kv_cache",))


def step_with_norm(engine: Any) -> float:
    """`engine.step()` at the accumulation boundary; returns the gradient norm before clipping."""
    norm = None
    if engine.zero_optimization_stage() == 0 and not engine.bfloat16_enabled():  # DeepSpeed reports none here
        grads = [p.grad.float().norm() for p in engine.module.parameters() if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack(grads))) if grads else 0.0
    engine.step()
    return norm if norm is not None else float(engine.get_global_grad_norm() or 0.0)


def engine_owners(policies: Mapping[str, Policy]) -> dict[str, Policy]:
    """One policy per engine, keyed by the name the engine is saved under (adapters share their base's)."""
    out: dict[str, Policy] = {}
    for p in policies.values():
        if p.engine is not None:
            out.setdefault(p.engine_owner, p)
    return out


def save_engines(policies: Mapping[str, Policy], folder: Path) -> None:
    """Every engine's module, optimizer and scheduler state under folder/<owner> (collective)."""
    for owner, p in engine_owners(policies).items():
        p.engine.save_checkpoint(str(folder / owner), tag="state", save_latest=False)


def load_engines(policies: Mapping[str, Policy], folder: Path) -> None:
    for owner, p in engine_owners(policies).items():
        path, _ = p.engine.load_checkpoint(str(folder / owner), tag="state")
        if path is None:
            raise ValueError(f"checkpoint {folder} holds no state for policy `{owner}`")
