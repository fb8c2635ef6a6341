"""The trainer's held-out evaluation: Avg@k and Pass@k per dataset and per prompt, over ranks.

Each rank samples k episodes of its share of every dataset's prompts; one all_reduce of
per-prompt correct counts (and cost and invalid-output sums) gives every rank the whole
picture, so the per-prompt outcomes cost nothing beyond the evaluation itself. The per-prompt
counts are what a paired comparison of two runs resamples (`srpo-dsl sweep`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from srpo_dsl.jsonvalue import JsonObject, JsonValue
from srpo_dsl.rl.distributed.process_group import Dist, all_reduce
from srpo_dsl.rl.loop.role_metrics import MetricKeys, role_invalid_rates, role_invalid_sums
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.metrics import at_k, is_correct, macro_average
from srpo_dsl.seeds import seed_of

HELDOUT = "heldout"  # the name of the task's own eval split


@dataclass(frozen=True)
class EvalSet:
    """One held-out dataset: its name (HELDOUT for the task's own eval split, else the file's stem)."""

    name: str
    tasks: list[dict]


@dataclass(frozen=True)
class HeldoutEvaluation:
    """An evaluation's eval.jsonl row and its eval_prompts.jsonl row."""

    row: JsonObject
    prompts: JsonObject


def evaluate_sets(
    executor: Executor, sets: Sequence[EvalSet], k: int, seed: int, step: int, dist: Dist, keys: MetricKeys
) -> HeldoutEvaluation:
    """Avg@k / Pass@k per dataset, their macro average, cost per episode, per-role invalid rates."""
    counts, totals = [], [0.0, 0.0, 0.0, *([0.0] * 2 * len(keys.roles))]  # episodes, tokens, calls, roles
    for index, data in enumerate(sets):
        share = data.tasks[dist.rank :: dist.world_size]
        seed_k = seed_of("eval", seed, step, index)
        episodes = executor.run(share, samples=k, seed=seed_k, branching=False) if share else []
        local = [0.0] * len(data.tasks)
        for j in range(len(share)):
            local[dist.rank + j * dist.world_size] = sum(
                is_correct(ep.reward) for ep in episodes[j * k : (j + 1) * k]
            )
        counts.append(local)
        sums = [len(episodes), sum(e.cost.tokens for e in episodes), sum(e.cost.calls for e in episodes)]
        totals = [a + b for a, b in zip(totals, sums + role_invalid_sums(keys, episodes))]
    reduced = all_reduce([c for local in counts for c in local] + totals, dist.device)
    per_set, at = [], 0
    for data in sets:
        per_set.append([round(c) for c in reduced[at : at + len(data.tasks)]])
        at += len(data.tasks)
    n_episodes, tokens, calls, *invalid = reduced[at:]
    return HeldoutEvaluation(
        heldout_row(sets, per_set, k, step)
        | {"tokens_per_episode": tokens / max(n_episodes, 1), "calls_per_episode": calls / max(n_episodes, 1)}
        | {f"role/{r}/invalid_rate": rate for r, rate in role_invalid_rates(keys, invalid).items()},
        {
            "step": step,
            "k": k,
            "datasets": {
                d.name: {"ids": [str(t["id"]) for t in d.tasks], "correct": list[JsonValue](c)}
                for d, c in zip(sets, per_set)
            },
        },
    )


def heldout_row(sets: Sequence[EvalSet], correct: Sequence[Sequence[int]], k: int, step: int) -> JsonObject:
    """eval.jsonl's metrics: per dataset Avg@k and Pass@k over its prompts (k samples each), then their
    macro means."""
    per_set = [at_k([(k, c) for c in cs], k) for cs in correct]
    datasets = {d.name: m._asdict() | {"n_prompts": len(cs)} for d, m, cs in zip(sets, per_set, correct)}
    return {
        "step": step,
        **macro_average(per_set)._asdict(),
        "k": k,
        "n_prompts": sum(m["n_prompts"] for m in datasets.values()),
        "datasets": datasets,
    }
