"""From a plan to a run ready to train: the data, the engines, the executor, the run's folder, and the
latest checkpoint resumed when asked (`prepare_run`); `TrainingRun` is everything a step reads."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srpo_dsl.errors import InputError
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.registries import ROLLOUT_ENGINES
from srpo_dsl.rl.distributed.process_group import Dist, barrier, init_distributed
from srpo_dsl.rl.engines.policies import TrainingPolicy, sync_weights
from srpo_dsl.rl.loop.checkpoint import (
    describe_changes,
    latest_checkpoint,
    load_checkpoint,
    read_rank_state,
    read_state,
    resume_changes,
)
from srpo_dsl.rl.loop.decode_caches import cap_caches
from srpo_dsl.rl.loop.heldout import HELDOUT, EvalSet
from srpo_dsl.rl.loop.plan import TrainError, TrainPlan
from srpo_dsl.rl.loop.plots import run_plots
from srpo_dsl.rl.loop.role_metrics import MetricKeys
from srpo_dsl.rl.loop.runlog import RunLog
from srpo_dsl.rl.loop.update import Temperatures
from srpo_dsl.rl.objective.losses import Objective
from srpo_dsl.rl.objective.plugins import training_objective
from srpo_dsl.rl.transport.feed import Feed, send_setup
from srpo_dsl.rl.transport.link import Link
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import CompiledWorkflow


@dataclass(frozen=True)
class TrainingRun:
    """Everything a training step reads; `start` is the last step already done (0: a fresh run)."""

    out: Path
    workflow: CompiledWorkflow
    opts: TrainOptions
    dist: Dist
    policies: Mapping[str, TrainingPolicy]
    executor: Executor
    tasks: Sequence[dict]  # a .jsonl file's rows parsed when drawn (`envs.task_table`)
    eval_sets: list[EvalSet]  # the held-out datasets, each cut to eval_size prompts
    config: Mapping[str, Any]
    start: int
    log: RunLog | None  # rank 0 only
    feed: Feed | None = None  # the link to the rollout workers (None: this process generates)
    objective: Objective = field(init=False)  # as `opts` name it; the user's code is imported here
    temperatures: Temperatures = field(init=False)
    keys: MetricKeys = field(init=False)  # the roles and event types of the per-role metrics
    began: float = field(
        init=False, default_factory=time.perf_counter
    )  # engines ready: `time/elapsed` is from here

    def __post_init__(self) -> None:
        object.__setattr__(self, "objective", training_objective(self.opts, self.workflow.folder))
        object.__setattr__(self, "temperatures", role_temperatures(self.graph))
        object.__setattr__(self, "keys", MetricKeys.of(self.graph))

    @property
    def graph(self) -> EventGraph:
        return self.workflow.graph


def role_temperatures(graph: EventGraph) -> dict[str, dict[str, float]]:
    """temperatures[policy][role] of every acting agent (0 = greedy scores at temperature 1)."""
    out: dict[str, dict[str, float]] = {}
    for node in graph.event_nodes:
        for agent in node.agents:
            out.setdefault(agent.policy, {})[agent.name] = float(agent.temperature)
    return out


def prepare_run(plan: TrainPlan, link: Link | None = None) -> TrainingRun:
    """Load the data, build the engines and the executor, and resume the latest checkpoint if asked."""
    from srpo_dsl.rl.engines.ds_engine import EngineConfigError, ds_config
    from srpo_dsl.rl.engines.policies import build_policies
    from srpo_dsl.runtime.setup import build_tools

    wf, opts, out = plan.workflow, plan.opts, plan.out
    tasks, eval_sets = checked_data(plan)
    found = latest_checkpoint(out) if plan.resume else None
    dist = init_distributed(plan.device, link.layout.trainers if link else None)
    paths = model_paths(wf.graph, plan.setup.models, dist)
    if link is not None:
        send_setup(link, paths)
    cache_cap = check_memory(plan, paths, dist)
    offload, user = plan.setup.offload, plan.ds_overrides
    engine_config = ds_config(
        opts, device=plan.device, world_size=dist.world_size, offload=offload, user=user
    )
    config = run_config(plan, paths, dist.world_size, engine_config)
    state = resumable_state(found, config) if found else None
    try:
        policies = build_policies(wf.graph, paths, opts, dist, engine_config, plan.rollout)
    except EngineConfigError as exc:
        raise InputError(f"{plan.setup.ds_config or 'the DeepSpeed config'}: {exc}") from None
    cap_caches(policies, cache_cap)
    backends = {n: p.backend for n, p in policies.items()}
    executor = Executor(wf.graph, backends, wf.renderer(), build_tools(wf), opts)
    start = restore(found, state, policies, dist) if state is not None else 0
    log = RunLog(out, config, start, wf.graph, opts.trackers, run_plots) if dist.rank == 0 else None
    feed = Feed(link, opts, policies, dist.device) if link else None
    if feed is not None:  # the workers start from the weights trained so far, and the batches received
        feed.begin(policies, start, read_rank_state(found, "batches", dist.rank, []) if state else [])
    return TrainingRun(out, wf, opts, dist, policies, executor, tasks, eval_sets, config, start, log, feed)


def run_config(
    plan: TrainPlan, paths: Mapping[str, str], world_size: int, engine_config: Mapping[str, Any]
) -> dict[str, Any]:
    """OUT/config.json: what a resumed run must keep (`checkpoint.resume_changes`)."""
    graph, setup = plan.workflow.graph, plan.setup
    config = {
        "workflow": str(plan.workflow.path.resolve()),
        "graph_hash": graph.hash,
        "options": plan.opts.model_dump(),
        "models": dict(paths),
        "adapters": adapter_layout(graph),
        "lora": {n: p.lora for n, p in graph.policies.items() if p.lora and p.base is None} or None,
        "device": plan.device,
        "world_size": world_size,
        "offload": setup.offload,
        "backend": setup.backend,
        "decode": setup.decode,
        "ds_config": engine_config,
    }
    if setup.eval_data:  # else: the task's eval split
        config["eval_data"] = [str(Path(p).resolve()) for p in setup.eval_data]
    return config


def checked_data(plan: TrainPlan) -> tuple[Sequence[dict], list[EvalSet]]:
    """The training and held-out tasks (a task's own loader runs here: the user's Python)."""
    from srpo_dsl.envs.data import shared_reads
    from srpo_dsl.runtime.setup import task_data

    with shared_reads():  # a task's eval split in the file of its train split: one read
        tasks = task_data(plan.workflow, split="train")
        eval_sets = held_out_sets(plan.workflow, plan.setup.eval_data, plan.opts.eval_size)
    if len(tasks) < plan.opts.batch:
        raise TrainError(f"batch = {plan.opts.batch} prompts per step but the task has only {len(tasks)}")
    return tasks, eval_sets


def held_out_sets(wf: CompiledWorkflow, eval_data: Sequence[Path], size: int) -> list[EvalSet]:
    """The task's own eval split (named `heldout`: paired across workflows of one task), or one set per
    `eval_data` file (named by its stem, distinct: `plan.check_eval_names`)."""
    from srpo_dsl.runtime.setup import task_data

    if not eval_data:
        return [EvalSet(HELDOUT, task_data(wf, split="eval")[:size])]
    return [EvalSet(Path(p).stem, task_data(wf, split="eval", data=Path(p))[:size]) for p in eval_data]


def adapter_layout(graph: EventGraph) -> dict[str, dict[str, object]] | None:
    """Each adapter's base and LoRA options (None without adapters): a resumed run must keep them."""
    layout = {n: {"base": p.base, **(p.lora or {})} for n, p in graph.policies.items() if p.base is not None}
    return layout or None


def check_memory(plan: TrainPlan, paths: Mapping[str, str], dist: Dist) -> float | None:
    """On CUDA, before loading: the policies' training state, with each trained model's KL reference copy
    when `kl > 0`, must fit this GPU (rl/engines/fit.py). Returns the bytes the rollout engines may keep
    in static decode caches (None: uncapped, on CPU)."""
    from srpo_dsl.rl.engines.fit import MemoryLayout, check_fit, decode_cache_cap

    opts = plan.opts
    engine = ROLLOUT_ENGINES[plan.setup.backend]
    budget, checkpointing = opts.max_tokens_per_micro_batch, opts.gradient_checkpointing
    layout = MemoryLayout(
        opts.zero, dist.world_size, plan.setup.offload, engine, opts.kl > 0, budget, checkpointing
    )
    if problem := check_fit(plan.workflow.graph, paths, layout, dist.device):
        raise TrainError(problem)
    return decode_cache_cap(plan.workflow.graph, paths, layout, dist.device)


def model_paths(graph: EventGraph, models: Mapping[str, str], dist: Dist) -> dict[str, str]:
    """Each policy's local path or repo id; rank 0 resolves first (it builds a missing `builtin:tiny`)."""
    from srpo_dsl.models.specs import resolve_model_spec

    if dist.rank != 0:
        barrier()
    paths = {name: resolve_model_spec(models.get(name, p.model)) for name, p in graph.policies.items()}
    if dist.rank == 0:
        barrier()
    return paths


def resumable_state(found: Path, config: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's run state, if it was written with this config (`resume_changes`)."""
    state = read_state(found)
    if changes := resume_changes(state["config"], config):
        raise TrainError(f"cannot resume {found}: changed since it was written: {describe_changes(changes)}")
    return state


def restore(found: Path, state: Mapping[str, Any], policies: Mapping[str, TrainingPolicy], dist: Dist) -> int:
    """Load engines and RNG states; the loaded weights reach generation. Returns the last step done."""
    load_checkpoint(found, policies, dist)
    sync_weights(policies)  # the loaded weights reach generation (ZeRO-3: its full copy)
    for p in policies.values():
        p.backend.version = state["versions"].get(p.name, 0)
    return state["data_cursor"]["next_step"] - 1
