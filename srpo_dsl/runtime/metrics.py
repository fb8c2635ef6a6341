"""Avg@k, Pass@k (unbiased estimator) and the cost proxies of docs/cli.md (`srpo-dsl eval`)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from srpo_dsl.runtime.episode import Cost


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k draws without replacement from n samples, c of them correct, is correct).

    `1 - C(n-c, k) / C(n, k)`, computed as a product to stay exact for large n.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def is_correct(task_score: float) -> bool:
    """An episode counts as correct for Avg@k and Pass@k when its task score is 1."""
    return task_score >= 1.0 - 1e-9


class AtK(NamedTuple):
    """Avg@k and Pass@k (fractions) of a dataset, or their macro average over datasets."""

    avg_at_k: float
    pass_at_k: float


def prompt_at_k(n: int, c: int, k: int) -> AtK:
    """One prompt's outcome from its n >= k samples, c of them correct: c / n and the unbiased Pass@k."""
    return AtK(c / n, pass_at_k(n, c, k))


def at_k(counts: Iterable[tuple[int, int]], k: int) -> AtK:
    """A dataset's Avg@k and Pass@k: the means over its prompts of `prompt_at_k` of each prompt's
    (samples n, correct c); 0 for a dataset without prompts."""
    per_prompt = [prompt_at_k(n, c, k) for n, c in counts]
    total = max(len(per_prompt), 1)
    return AtK(sum(p.avg_at_k for p in per_prompt) / total, sum(p.pass_at_k for p in per_prompt) / total)


class Scored(Protocol):
    """An episode (`runtime.episode.Episode`): its reward decides whether it is correct."""

    prompt_id: str
    reward: float
    cost: Cost


@dataclass(frozen=True)
class DatasetMetrics:
    name: str
    queries: int
    samples: int  # per query (n >= k; the smallest n when queries differ)
    k: int
    avg_at_k: float
    pass_at_k: float
    tokens_per_episode: float  # C_tok: generated tokens of all members of all events
    calls_per_episode: float  # C_call: model calls (members)
    tool_calls_per_query: float  # C_tool: tool calls made to answer one query (mean over its samples)


def dataset_metrics(name: str, episodes: Iterable[Scored], k: int) -> DatasetMetrics:
    """Per-query Avg@k (fraction correct) and Pass@k (unbiased), averaged over queries (`at_k`).

    Correct = a task score of 1 (the reward function before penalties). Every query needs at
    least k samples (n may exceed k: both estimates then use all n). Costs are means over
    episodes; each episode answers its query once, so tool calls per episode are the tool
    calls per query.
    """
    by_prompt: dict[str, list[Scored]] = defaultdict(list)
    for ep in episodes:
        by_prompt[ep.prompt_id].append(ep)
    if not by_prompt:
        raise ValueError(f"{name}: no episodes")
    short = {p: len(eps) for p, eps in by_prompt.items() if len(eps) < k}
    if short:
        prompt, n = next(iter(short.items()))
        raise ValueError(
            f"{name}: Pass@{k} needs {k} samples per query; {len(short)} queries have fewer "
            f"(e.g. {prompt!r} has {n})"
        )
    counts = [(len(eps), sum(is_correct(ep.reward) for ep in eps)) for eps in by_prompt.values()]
    flat = [ep for eps in by_prompt.values() for ep in eps]
    return DatasetMetrics(
        name,
        len(by_prompt),
        min(len(eps) for eps in by_prompt.values()),
        k,
        *at_k(counts, k),
        sum(e.cost.tokens for e in flat) / len(flat),
        sum(e.cost.calls for e in flat) / len(flat),
        sum(e.cost.tool_calls for e in flat) / len(flat),
    )


class HasAtK(Protocol):
    """A dataset's metrics: `AtK`, `DatasetMetrics`."""

    @property
    def avg_at_k(self) -> float: ...
    @property
    def pass_at_k(self) -> float: ...


def macro_average(rows: Sequence[HasAtK]) -> AtK:
    """Unweighted mean over datasets of (Avg@k, Pass@k)."""
    if not rows:
        raise ValueError("macro average of no datasets")
    return AtK(sum(r.avg_at_k for r in rows) / len(rows), sum(r.pass_at_k for r in rows) / len(rows))
