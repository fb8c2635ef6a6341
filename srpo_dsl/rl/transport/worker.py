"""A rollout worker: generates the steps trainer rank 0 orders, with the newest weights it may use.

    engines = worker_engines(...)                 # each policy's rollout engine (ROLLOUT_ENGINES), no trainer
    inbox   = Inbox(link, newest)                 # a thread receiving orders and versions
    while (taken := inbox.next_step()):           # the smallest step ordered, once its version is held
        rollout(order.step)                       # the step's prompts and seeds, exactly as the trainer's;
                                                  # each generation call takes the newest version (`fresh`)
        send each trainer rank its share          # with the version it began with and the time spent waiting

Step t may begin once the worker holds version max(start, t - 1 - min(S, R)) (`schedule.py`): the
trainer about to take step t holds t - 1, and versions only grow during a step, so no member is
ever more than S steps stale (S = 0: the synchronous trainer). With `rollout_weights = newest` each
generation call of the step (an executor round, or its retries) first loads the newest version
received, so an episode may span versions; `scheduled`, the whole batch is generated with the
step's version. The worker never sleeps: it generates while the trainer updates.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import suppress

import torch

from srpo_dsl.backends.base import RolloutEngine
from srpo_dsl.envs.task_table import pick
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.rl.distributed.data_order import step_prompts
from srpo_dsl.rl.distributed.process_group import Dist
from srpo_dsl.rl.engines.adapters import with_adapters
from srpo_dsl.rl.engines.policies import Rollout, adapter_hosts, load_model, rollout_engine, with_lora
from srpo_dsl.rl.transport.fresh import Refresh, fresh_engines
from srpo_dsl.rl.transport.inbox import Inbox
from srpo_dsl.rl.transport.link import EPISODES, SETUP, Link, LinkError, RolloutBatch
from srpo_dsl.runtime.episode import Episode
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import CompiledWorkflow, build_tools, task_data
from srpo_dsl.seeds import seed_of


def worker_engines(
    graph: EventGraph, paths: Mapping[str, str], opts: TrainOptions, dist: Dist, rollout: Rollout
) -> dict[str, RolloutEngine]:
    """Each policy's rollout engine, built as the trainer builds its modules (same seeds for LoRA's
    initial weights); policies on one base share one engine."""
    hosts = adapter_hosts(graph, rollout)
    with_module = rollout.kind.generates_with_module
    out: dict[str, RolloutEngine] = {}
    for name, spec in graph.policies.items():
        if spec.base is None and name not in hosts:
            torch.manual_seed(seed_of("init", opts.seed, name))
            model, tokenizer = load_model(paths[name], dist)
            model = with_lora(model, spec.lora) if spec.lora and spec.trainable else model
            module = model.to(dist.device).eval().requires_grad_(False) if with_module else None
            out[name] = rollout_engine(rollout, module, tokenizer, paths[name], dist)
    for base in hosts:
        torch.manual_seed(seed_of("init", opts.seed, base))
        model, tokenizer = load_model(paths[base], dist)
        module = with_adapters(model, graph.adapters_on(base)).to(dist.device).eval().requires_grad_(False)
        engine = rollout_engine(rollout, module, tokenizer, paths[base], dist)
        out |= {n: engine for n, p in graph.policies.items() if n == base or p.base == base}
    return out


def run_worker(wf: CompiledWorkflow, opts: TrainOptions, link: Link, rollout: Rollout) -> None:
    """Generate the steps trainer rank 0 orders, each with the weights it names, until it says stop."""
    if link.device.type == "cuda":
        torch.cuda.set_device(link.device)
    paths = link.recv_object(0, SETUP)  # each policy's model, as the trainer resolved it
    if not isinstance(paths, dict):
        raise LinkError(f"trainer rank 0 sent a {type(paths).__name__}, not the policies' models")
    dist = Dist(link.layout.rank, 0, 1, link.device)
    engines = worker_engines(wf.graph, paths, opts, dist, rollout)
    newest = opts.rollout_weights == "newest"
    inbox = Inbox(link, newest)
    refresh = Refresh(engines, inbox if newest else None)
    executor = Executor(wf.graph, fresh_engines(engines, refresh), wf.renderer(), build_tools(wf), opts)
    tasks = task_data(wf, split="train")
    link.read(inbox)
    idle, clock = 0.0, time.perf_counter()
    while (taken := inbox.next_step()) is not None:
        order, weights = taken
        refresh.offer(weights)
        began = inbox.loaded  # the step's oldest version: versions only grow during it
        idle += time.perf_counter() - clock
        prompts = pick(tasks, step_prompts(len(tasks), opts.batch, order.step, opts.seed))
        episodes = executor.run(prompts, samples=opts.group, seed=seed_of("rollout", opts.seed, order.step))
        clock = time.perf_counter()
        link.flush()  # the previous batch was taken
        send_batch(link, order.step, began, time.perf_counter() - clock + idle, episodes, opts.group)
        idle, clock = 0.0, time.perf_counter()
    with suppress(LinkError):  # stopped: the trainer needs nothing more (it may be gone already)
        link.flush()


def send_batch(link: Link, step: int, version: int, idle: float, episodes: list[Episode], group: int) -> None:
    """Each trainer rank's share: every `trainers`-th prompt from its rank on, as the synchronous trainer
    splits a step (whole groups of `group` episodes)."""
    trainers = link.layout.trainers
    prompts = [episodes[i : i + group] for i in range(0, len(episodes), group)]
    for rank in range(trainers):
        share = [ep for g in prompts[rank::trainers] for ep in g]
        link.send_object(RolloutBatch(step, version, idle, share), rank, EPISODES)
