"""A paired sweep, timed: its cells side by side in one command.

    python bench/sweep_bench.py --experiment experiments/async_quickstart.toml --gain 25 --out runs/async_bench
    python bench/sweep_bench.py --experiment experiments/branching.toml --gain 20 --out runs/branching
    python bench/sweep_bench.py --smoke     # a check that it runs: one seed, 1 step of 2 x 2, in a temp folder

Runs `srpo-dsl sweep EXPERIMENT` one run at a time (resumable: finished runs are kept) with every
run given this machine's cores (OMP_NUM_THREADS, default 2): a synchronous trainer uses them as
threads, an asynchronous run shares them out between its trainer and its rollout worker. Then
prints, per cell (mean ± sample std over seeds, and the mean of the per-seed ratios to the
baseline cell):

- optimizer steps per second: the run's steps over the wall-clock from the end of the held-out
  evaluation at step 0 to the end of the last step (the periodic evaluations included: every
  cell runs the same ones);
- time to +GAIN points: from the same origin to the end of the first held-out evaluation at least
  GAIN Avg@k points above step 0's (evaluations every `eval_every` steps: the time is that coarse);
- final held-out Avg@k, paired against the baseline by the sweep (its results.md is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "async_quickstart.toml"
SMOKE = ["-q", "--option", "steps=1", "--option", "batch=2", "--option", "group=2", "--option", "eval_size=2"]
SMOKE += ["--option", "eval_k=1", "--option", "eval_every=1", "--option", "save_every=1"]


@dataclass(frozen=True)
class Timing:
    steps_per_s: float
    to_gain_s: float | None  # None: never GAIN points above step 0 at an evaluation
    final_avg: float


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def timing(run: Path, gain: float) -> Timing:
    """One run's figures from its metrics.jsonl and eval.jsonl (`time/elapsed`: seconds since its engines were
    ready); `gain`: the held-out gain (a fraction) whose time is measured."""
    steps, evals = read_jsonl(run / "metrics.jsonl"), read_jsonl(run / "eval.jsonl")
    origin, first = evals[0]["time/elapsed"], evals[0]["avg_at_k"]
    reached = [e["time/elapsed"] - origin for e in evals if e["avg_at_k"] >= first + gain]
    per_s = steps[-1]["step"] / (steps[-1]["time/elapsed"] - origin)
    return Timing(per_s, reached[0] if reached else None, evals[-1]["avg_at_k"])


def mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3g} ± {spread:.2g}"


def ratio(cell: dict[int, Timing], base: dict[int, Timing], field: str, inverse: bool = False) -> str:
    """The mean over paired seeds of cell / base (`inverse`: base / cell, for times)."""
    pairs = [(getattr(cell[s], field), getattr(base[s], field)) for s in cell if s in base]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    if not pairs:
        return "—"
    values = [b / a if inverse else a / b for a, b in pairs]
    return f"{statistics.mean(values):.2f}×"


def table(runs: dict[str, dict[int, Timing]], baseline: str, gain: float) -> str:
    lines = [
        f"| cell | steps/s | vs {baseline} | time to +{100 * gain:g} (s) | vs {baseline} | final Avg@k (%) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, cell in runs.items():
        times = [t.to_gain_s for t in cell.values() if t.to_gain_s is not None]
        reached = f"{mean_std(times)} ({len(times)}/{len(cell)})"
        finals = [100 * t.final_avg for t in cell.values()]
        lines.append(
            f"| {name} | {mean_std([t.steps_per_s for t in cell.values()])} "
            f"| {ratio(cell, runs[baseline], 'steps_per_s')} | {reached} "
            f"| {ratio(cell, runs[baseline], 'to_gain_s', inverse=True)} | {mean_std(finals)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "async_bench")
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT)
    parser.add_argument("--gain", type=float, default=25.0, help="held-out points whose time is measured")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 2)))
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that it runs: one seed, 1 step of 2 x 2, --out a temp folder",
    )
    args = parser.parse_args()
    if not args.smoke:
        bench(args, smoke=False)
        return
    with tempfile.TemporaryDirectory() as tmp:
        args.out = Path(tmp)
        bench(args, smoke=True)


def bench(args: argparse.Namespace, smoke: bool) -> None:
    """Runs the sweep (`smoke`: its first seed, shrunk by SMOKE), then prints the table and its results."""
    from srpo_dsl.sweep.experiment import load_experiment

    exp = load_experiment(args.experiment)
    extra = []
    if smoke:
        exp = replace(exp, seeds=exp.seeds[:1])
        extra = ["--seeds", str(exp.seeds[0]), *SMOKE]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    sweep = [sys.executable, "-m", "srpo_dsl", "sweep", str(args.experiment), "--out", str(args.out)]
    code = subprocess.run([*sweep, "--jobs", "1", *extra], env=env).returncode
    if code != 0:
        sys.exit(code)
    from srpo_dsl.sweep.state import run_dir

    gain = args.gain / 100
    runs = {c.name: {s: timing(run_dir(args.out, c.name, s), gain) for s in exp.seeds} for c in exp.cells}
    print(f"\n{os.cpu_count()} cores, OMP_NUM_THREADS={args.threads}; {len(exp.seeds)} seeds\n")
    print(table(runs, exp.baseline, gain))
    print("\n" + (args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
