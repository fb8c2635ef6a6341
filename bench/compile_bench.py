"""Front-end scaling: parse + check + compile generated workflows of growing size.

    python bench/compile_bench.py            # prints a markdown table
    python bench/compile_bench.py --smoke    # a check that it runs: the smallest size, once

Each size has N worker pools (3 replicas each), N/10 routers and verifiers, and S steps:
rounds of `route` / routed `parallel` / `verify` inside bounded loops, with branches.
Time is the median and the best of a few runs (the best is the least disturbed by other work on the
machine); peak memory is measured with tracemalloc.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from srpo_dsl.lang import analyze


def generate(n_agents: int, n_steps: int) -> str:
    n_ctrl = max(1, n_agents // 10)
    out = ["workflow generated", 'policy lm = hf("model")', 'task math(data = "d.jsonl")']
    for i in range(n_agents):
        out.append(f'agent w{i}[3] uses lm prompt "p.j2" emits boxed')
    for i in range(n_ctrl):
        out.append(f'agent r{i} uses lm prompt "p.j2" emits route(w{i})')
        out.append(f'agent v{i} uses lm prompt "p.j2" emits verdict(approve, reject)')
    out.append('agent final uses lm prompt "p.j2" emits final_boxed')
    steps, k = 0, 0
    while steps < n_steps:
        c, w = k % n_ctrl, k % n_agents
        out += [
            "repeat at most 3 {",
            f"  route r{c}",
            f"  parallel w{c} by r{c}",
            f"  verify v{c}",
            f"  if v{c} == reject {{ parallel w{w} }} else {{ revise w{w}[2] }}",
            f"}} until v{c} == approve",
        ]
        steps += 6
        k += 1
    for i in range(n_agents):  # every pool acts at least once
        out.append(f"parallel w{i}")
    out.append("aggregate final")
    out.append("reward math_equiv(final, task.answer) invalid -0.1")
    return "\n".join(out) + "\n"


def measure(text: str, folder: Path, repeats: int) -> tuple[float, float, float, int]:
    """Time each compile alone: the previous result is dropped first, as a one-file process would.

    A compile is what `srpo-dsl compile` does: parse, check, build the typed `EventGraph`, and
    convert it to the documented `networkx.DiGraph`."""
    times, nodes = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = analyze(text, str(folder / "gen.srpo"))
        graph = result.graph
        times.append(time.perf_counter() - t0)
        assert graph is not None, result.diagnostics[:3]
        nodes = graph.number_of_nodes()
        del result, graph
    tracemalloc.start()
    analyze(text, str(folder / "gen.srpo")).graph  # noqa: B018 (the conversion is part of a compile)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), min(times), peak / 2**20, nodes


def reference_ms() -> float:
    """Median time of a fixed pure-Python loop, to compare runs taken while the machine ran at other speeds."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        sum(i * i for i in range(1_000_000))
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a check that it runs: the smallest size, once")
    args = ap.parse_args()
    sizes = [(10, 100), (100, 1_000), (1_000, 10_000)]
    if args.smoke:
        sizes, args.repeats = sizes[:1], 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "p.j2").write_text("{{ task.question }}{% for o in team_context %}{{ o.text }}{% endfor %}")
        analyze(generate(5, 10), str(folder / "warm.srpo"))  # build the parser tables once
        print(
            f"machine: {platform.processor() or platform.machine()}, {platform.system()}, "
            f"Python {platform.python_version()}; load average {os.getloadavg()[0]:.2f}; "
            f"reference loop {reference_ms():.0f} ms "
            "(a fixed pure-Python workload: how fast the machine is right now)"
        )
        print(
            "| agents | steps | lines | graph nodes | median (s) | best (s) | µs / line (median) | peak memory (MiB) |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for agents, steps in sizes:
            text = generate(agents, steps)
            lines = text.count("\n")
            secs, best, mib, nodes = measure(text, folder, args.repeats)
            print(
                f"| {agents:,} | {steps:,} | {lines:,} | {nodes:,} | {secs:.3f} | {best:.3f} "
                f"| {secs / lines * 1e6:.1f} | {mib:.1f} |"
            )


if __name__ == "__main__":
    main()
