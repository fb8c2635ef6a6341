"""The figures of a trained case, derived from its step records as they come: what a step record keeps of
the trainer's metrics.jsonl row, and each part's summary over the finished steps (medians leave the first
step out: it pays for warm-up, the allocator, kernels and DeepSpeed's buckets)."""

from __future__ import annotations

import statistics
from typing import Any


def step_figures(row: dict[str, Any]) -> dict[str, Any]:
    """A step record's figures from the trainer's metrics.jsonl `row` (rows = events x mean set size;
    response tokens = rows x the mean response length)."""
    rows = row["num_events"] * row["mean_set_size"]
    return {
        "step": row["step"],
        "step_s": row["time"],
        "update_s": row["time/update"],
        "rows": rows,
        "events": row["num_events"],
        "mean_k": row["mean_set_size"],
        "response_tokens": row["response_length"] * rows,
        "peak_gib": row.get("memory/peak_gib"),
        "elapsed_s": row["time/elapsed"],
        "staleness": row.get("async/staleness_mean"),
    }


def steady(values: list[float]) -> float:
    """The median after the first step (the only step's value when there is one)."""
    return statistics.median(values[1:] if len(values) > 1 else values)


def peak_of(steps: list[dict[str, Any]]) -> float | None:
    peaks = [s["peak_gib"] for s in steps if s["peak_gib"] is not None]
    return max(peaks) if peaks else None


def update_figures(
    steps: list[dict[str, Any]], prompt_tokens: float, params: int, peak_flops: float | None
) -> dict[str, Any]:
    """Step and update time; update tokens/s over prompt + response tokens; MFU = 6 x parameters x update
    tokens/s / the GPU's dense bf16 peak (attention left out; None without a known peak); rollout tokens/s
    = response tokens / (step - update time), and over the whole step; the peak memory of any step."""
    tokens = [s["rows"] * prompt_tokens + s["response_tokens"] for s in steps]
    per_s = steady([t / s["update_s"] for t, s in zip(tokens, steps)])
    return {
        "steps": len(steps),
        "step_ms": 1000 * steady([s["step_s"] for s in steps]),
        "update_ms": 1000 * steady([s["update_s"] for s in steps]),
        "update_tokens_per_s": per_s,
        "mfu": 6 * params * per_s / peak_flops if peak_flops else None,
        "rollout_tokens_per_s": steady([s["response_tokens"] / (s["step_s"] - s["update_s"]) for s in steps]),
        "step_tokens_per_s": steady([s["response_tokens"] / s["step_s"] for s in steps]),
        "peak_gib": peak_of(steps),
    }


def team_figures(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The team's step time, events per step, mean set size, generated tokens per step, peak memory."""
    return {
        "steps": len(steps),
        "step_ms": 1000 * steady([s["step_s"] for s in steps]),
        "events": statistics.mean(s["events"] for s in steps),
        "mean_k": statistics.mean(s["mean_k"] for s in steps),
        "tokens_per_step": statistics.mean(s["response_tokens"] for s in steps),
        "peak_gib": peak_of(steps),
    }


def async_figures(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Optimizer steps per second after the first step (None with one step), and the mean staleness of
    those steps (0 where the trainer reports none: a synchronous run)."""
    later = steps[1:]
    span = steps[-1]["elapsed_s"] - steps[0]["elapsed_s"] if later else 0.0
    return {
        "steps": len(steps),
        "steps_per_s": len(later) / span if span > 0 else None,
        "staleness": statistics.mean(s["staleness"] or 0.0 for s in later) if later else None,
    }
