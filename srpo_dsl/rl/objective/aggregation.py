"""Per-unit surrogate terms -> one scalar: the aggregation modes, all of them here.

    event-mean   J = 1/|B| * sum_e  term_e      |B|: events of the optimizer step   (srpo)
    token-mean   J = 1/|T| * sum_iu term_iu     |T|: generated tokens of the step   (grpo, drmas, KL, entropy)
    row-mean     J = 1/|R| * sum_i  term_i      |R|: rows (responses) of the step   (seq)
    episode-mean J = 1/|P| * sum_p  term_p      |P|: episodes of the step           (traj)

The count is GLOBAL (all ranks and micro-batches of the optimizer step), so a call's value
is its share of one mean, and the shares sum to the full-batch value whatever the layout.
The modes are the entries of `srpo_dsl.registries.AGGREGATIONS`; `register_aggregation` adds one.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from srpo_dsl.registries import AGGREGATIONS


@dataclass(frozen=True)
class Aggregation:
    """What a mode averages over: the keyword (and metric) holding the count, and the terms' rank."""

    count: str  # one of COUNTS
    dims: int  # terms are [E] events (or episodes), [B, T] tokens (0 off the mask) or [B] rows

    def __post_init__(self) -> None:
        if self.count not in COUNTS or self.dims not in (1, 2):
            raise ValueError(f"an aggregation counts one of {', '.join(COUNTS)} over 1-d or 2-d terms")


COUNTS = ("num_events", "num_tokens", "num_rows", "num_episodes")  # the global counts an objective is given


EVENT_MEAN = Aggregation("num_events", 1)
TOKEN_MEAN = Aggregation("num_tokens", 2)
ROW_MEAN = Aggregation("num_rows", 1)
EPISODE_MEAN = Aggregation("num_episodes", 1)  # its terms are over episodes: an episode is never split
get_aggregation = AGGREGATIONS.lookup


register_aggregation = AGGREGATIONS.add  # (name, Aggregation(count, dims)): J = sum(terms) / the count


def aggregate(terms: Tensor, mode: str, global_count: int) -> Tensor:
    """J = sum(terms) / N, N = the global count of the mode's unit (at least 1)."""
    dims = get_aggregation(mode).dims
    if terms.dim() != dims:
        raise ValueError(f"{mode} aggregates {dims}-d terms, got shape {tuple(terms.shape)}")
    return terms.sum() / max(global_count, 1)
