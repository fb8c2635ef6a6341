"""DIR/results.md, results.csv, results.json, curves.png and dynamics.png of a sweep (rebuilt from disk)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from srpo_dsl.io import write_atomic
from srpo_dsl.sweep.dynamics import CLIP, WINDOW, RunDynamics, cell_summary, collect_dynamics
from srpo_dsl.sweep.results import METRICS, PAIRED, SCHEME, CellResult, collect, sweep_k, to_json, without_nan
from srpo_dsl.sweep.state import SweepState, read_sweep_state
from srpo_dsl.sweep.stats import LEVEL, REPLICATES, Difference, Spread

OUTPUTS = ("results.md", "results.csv", "results.json", "curves.png", "dynamics.png")


def write_report(folder: Path) -> list[Path]:
    """Collect the sweep in `folder` and write its result files; ValueError (one line) if it cannot."""
    state = read_sweep_state(folder)
    cells = collect(folder, state)
    dynamics = collect_dynamics(folder, state)
    data = to_json(cells, state)
    write_atomic(folder / "results.json", json.dumps(without_nan(data), indent=2) + "\n")
    write_atomic(folder / "results.csv", results_csv(cells))
    write_atomic(folder / "results.md", results_md(cells, state, sweep_k(cells)) + dynamics_md(dynamics))
    from srpo_dsl.sweep.plot import plot_curves, plot_dynamics

    plot_curves(cells, sweep_k(cells), folder / "curves.png")
    plot_dynamics(dynamics, folder / "dynamics.png")
    return [folder / name for name in OUTPUTS]


def fmt(s: Spread, digits: int = 1) -> str:
    if s.n == 0:
        return "-"
    std = "n/a" if math.isnan(s.std) else f"{s.std:.{digits}f}"
    return f"{s.mean:.{digits}f} ± {std}"


def fmt_diff(d: Difference | str | None) -> str:
    if d is None:
        return ""
    if isinstance(d, str):
        return f"n/a ({d})"
    return f"{d.mean:+.1f} [{d.low:+.1f}, {d.high:+.1f}]"


def overrides_text(overrides: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "-"


def results_md(cells: list[CellResult], state: SweepState, k: int | None) -> str:
    """The tables a reader wants: per cell mean ± std over seeds, then each cell against the baseline."""
    at = f"@{k}" if k else "@k"
    lines = [
        f"# Sweep results: {state.plan['experiment']}",
        "",
        f"Held-out Avg{at} and Pass{at} in percent, macro over datasets; mean ± sample std "
        "(ddof = 1) over the seeds that finished; final = last evaluation, best = best evaluation; "
        "cost per episode at the last evaluation; wall time per run in seconds.",
        "",
        f"| cell | seeds | final Avg{at} | final Pass{at} | best Avg{at} | best Pass{at} "
        "| tokens/episode | calls/episode | wall s | overrides |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in cells:
        cols = [
            fmt(c.spreads[m])
            for m in ("final_avg", "final_pass", "best_avg", "best_pass", "tokens_per_episode")
        ]
        cols += [
            fmt(c.spreads["calls_per_episode"], 2),
            fmt(c.spreads["wall_s"], 0),
            overrides_text(c.overrides),
        ]
        lines.append(f"| {c.name} | {len(c.runs)} | " + " | ".join(cols) + " |")
    if baseline := state.plan.get("baseline"):
        lines += versus_md(cells, baseline, at)
    failures = [(c.name, seed, err) for c in cells for seed, err in c.failed.items()]
    if failures:
        lines += ["", "## Failed runs", ""] + [f"- `{n}` seed {s}: {e}" for n, s, e in failures]
    return "\n".join(lines) + "\n"


def versus_md(cells: list[CellResult], baseline: str, at: str) -> list[str]:
    ci = f"[{LEVEL:.0%} CI]"
    lines = [
        "",
        f"## Against the baseline `{baseline}`",
        "",
        f"Mean paired difference (cell - baseline, percentage points) of the final evaluation with its "
        f"{LEVEL:.0%} percentile interval from a paired bootstrap over (seed, prompt) ({SCHEME}; "
        f"{REPLICATES} replicates, fixed seed).",
        "",
        f"| cell | Δ final Avg{at} {ci} | Δ final Pass{at} {ci} | paired seeds |",
        "|---|---:|---:|---:|",
    ]
    for c in cells:
        if c.versus:
            seeds = next((d.n_seeds for d in c.versus.values() if isinstance(d, Difference)), 0)
            diffs = [fmt_diff(c.versus.get(m)) for m in PAIRED]
            lines.append(f"| {c.name} | {diffs[0]} | {diffs[1]} | {seeds} |")
    return lines


def results_csv(cells: list[CellResult]) -> str:
    """One row per cell: mean, std and n of every metric, and each paired difference with its interval."""
    header = ["cell", "workflow", "overrides", "seeds", "failed"]
    header += [f"{m}_{part}" for m in METRICS for part in ("mean", "std")]
    header += [f"diff_{m}_{part}" for m in PAIRED for part in ("mean", "low", "high", "seeds")]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for c in cells:
        row: list[str | int | float] = [
            c.name,
            c.workflow,
            overrides_text(c.overrides),
            len(c.runs),
            len(c.failed),
        ]
        row += [v for m in METRICS for v in (c.spreads[m].mean, c.spreads[m].std)]
        for m in PAIRED:
            d = c.versus.get(m)
            row += [d.mean, d.low, d.high, d.n_seeds] if isinstance(d, Difference) else ["", "", "", ""]
        writer.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in row])
    return buf.getvalue()


def dynamics_md(dynamics: dict[str, list[RunDynamics]]) -> str:
    """How each cell trained (metrics.jsonl): each run's means over its steps, mean ± std over seeds."""
    lines = [
        "",
        "## Training dynamics",
        "",
        f"Per run over its steps (metrics.jsonl), then mean ± std over seeds: the return of its last "
        f"{WINDOW} steps, the gradient norm, its coefficient of variation over the run (std / mean), "
        "tokens per model call, members per event (mean K), and each event type's clip fraction "
        "(percent). `dynamics.png` plots them per step.",
        "",
        "| cell | seeds | return | grad norm | grad-norm CV | response length | mean K "
        "| clip fraction per event type |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, runs in dynamics.items():
        if not runs:
            continue
        s = cell_summary(runs)
        cols = [fmt(s[k], 3) for k in ("return", "grad_norm", "grad_norm_cv")]
        cols += [fmt(s["response_length"], 1), fmt(s["mean_set_size"], 2)]
        clips = [f"{k[len(CLIP) :]} {100 * v.mean:.1f}" for k, v in s.items() if k.startswith(CLIP)]
        lines.append(f"| {name} | {len(runs)} | " + " | ".join(cols) + f" | {', '.join(clips) or '-'} |")
    return "\n".join(lines) + "\n"
