"""Orchestration overhead of the executor against raw batched `generate`, in one run.

    python bench/rollout_bench.py                # math_fixed (K=3) on the embedded model
    python bench/rollout_bench.py --smoke        # a check that it runs: 2 prompts x 2, 8 tokens, once

The executor runs `workflows/math_fixed.srpo` with every policy bound to the embedded model
(`builtin:tiny`). Every batch it sends to the backend is recorded (requests and seed); the
raw baseline then replays exactly those batches with the same model, so both sides generate
the same prompts, the same tokens and the same lengths. The ratio executor/raw is
throughput of the executor divided by throughput of the bare backend (goal: >= 0.9).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from srpo_dsl.lang.compile.graph import EventNode
from srpo_dsl.models.specs import policy_models
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import CompiledWorkflow, build_backends, build_tools, load_workflow

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """Wraps a backend; remembers every batch and seed it was asked for."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.name, self.version = inner.name, inner.version

    def generate(self, requests, *, seed=None):
        self.calls.append((list(requests), seed))
        return self.inner.generate(requests, seed=seed)


def capped(wf: CompiledWorkflow, max_tokens: int) -> CompiledWorkflow:
    """The workflow with every agent's max_tokens capped (the tiny model's short answers)."""
    g = wf.graph
    agents = {k: replace(a, max_tokens=min(a.max_tokens, max_tokens)) for k, a in g.agents.items()}
    nodes = {
        v: replace(node, agent=agents[node.agent.name]) if isinstance(node, EventNode) else node
        for v, node in g.nodes.items()
    }
    return replace(wf, graph=replace(g, nodes=nodes, agents=agents))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workflow", default=str(ROOT / "workflows/math_fixed.srpo"))
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48, help="cap every agent's max_tokens (tiny model)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--smoke", action="store_true", help="a check that it runs: 2 prompts x 2, 8 tokens, once"
    )
    args = ap.parse_args()
    if args.smoke:
        args.prompts, args.samples, args.max_tokens, args.repeats = 2, 2, 8, 1

    wf = capped(load_workflow(Path(args.workflow)), args.max_tokens)
    from srpo_dsl.envs.arith import make_arith_tasks

    tasks = [{**t, "question": f"What is {t['question']}?"} for t in make_arith_tasks(args.prompts, seed=1)]
    backends = build_backends(wf, "hf", policy_models(wf.graph, dict.fromkeys(wf.graph.policies, args.model)))
    ((policy, backend),) = backends.items()
    tools = build_tools(wf)

    exec_times, raw_times, tokens, episodes = [], [], 0, 0
    for rep in range(args.repeats + 1):  # the first round warms up
        rec = Recorder(backend)
        ex = Executor(wf.graph, {policy: rec}, wf.renderer(), tools)
        t0 = time.perf_counter()
        eps = ex.run(tasks, samples=args.samples, seed=rep)
        t_exec = time.perf_counter() - t0
        t0 = time.perf_counter()
        for requests, seed in rec.calls:
            backend.generate(requests, seed=seed)
        t_raw = time.perf_counter() - t0
        if rep:
            exec_times.append(t_exec)
            raw_times.append(t_raw)
            tokens = sum(ep.cost.tokens for ep in eps)
            episodes = len(eps)
            calls = len(rec.calls)
    te, tr = statistics.median(exec_times), statistics.median(raw_times)
    print(
        f"machine: {platform.machine()} {platform.system()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, device {'cuda' if torch.cuda.is_available() else 'cpu'}"
    )
    print(
        f"workflow {wf.name}, {episodes} episodes ({args.prompts} prompts x {args.samples}), "
        f"{calls} backend batches, {tokens} generated tokens, median of {args.repeats}"
    )
    print("| | seconds | episodes/s | generated tokens/s |")
    print("|---|---:|---:|---:|")
    print(f"| executor | {te:.2f} | {episodes / te:.1f} | {tokens / te:.0f} |")
    print(f"| raw batched generate | {tr:.2f} | {episodes / tr:.1f} | {tokens / tr:.0f} |")
    print(f"| ratio executor/raw | | {tr / te:.3f} | {tr / te:.3f} |")


if __name__ == "__main__":
    main()
