"""How old the weights behind an episode are, and the bound S on it (asynchronous rollouts).

A policy's version counts the optimizer steps its weights have had; the trainer about to take
step t holds version t - 1. A member generated with version v is t - 1 - v steps stale. An
episode is as stale as its oldest trained member (frozen policies never change: they do not
count), and one staler than `max_staleness` is dropped and counted, never trained on.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from srpo_dsl.runtime.episode import Episode


def episode_staleness(episode: Episode, current: int, trained: Collection[str]) -> int:
    """Steps between `current` and the oldest version of the episode's trained members (0: none)."""
    versions = [m.policy_version for e in episode.events for m in e.members if m.policy in trained]
    return current - min(versions) if versions else 0


@dataclass(frozen=True)
class Fresh:
    """The episodes within the bound, their staleness, and how many were dropped."""

    episodes: list[Episode]
    staleness: list[int]
    dropped: int

    def metrics(self) -> dict[str, float]:
        """`staleness_mean`, `staleness_max` (over the kept episodes) and `dropped_episodes`."""
        values = self.staleness or [0]
        return {
            "staleness_mean": sum(values) / len(values),
            "staleness_max": float(max(values)),
            "dropped_episodes": float(self.dropped),
        }


def within_bound(episodes: Sequence[Episode], current: int, limit: int, trained: Collection[str]) -> Fresh:
    """The episodes at most `limit` steps stale at version `current`, in order; the others dropped."""
    staleness = [episode_staleness(ep, current, trained) for ep in episodes]
    kept = [i for i, s in enumerate(staleness) if s <= limit]
    return Fresh([episodes[i] for i in kept], [staleness[i] for i in kept], len(episodes) - len(kept))


def stale_rows(
    versions: Sequence[int], policies: Sequence[str], current: int, trained: Collection[str]
) -> torch.Tensor:
    """[N] bool: rows of a trained policy generated with weights older than `current` (their behaviour
    policy is not the proximal one, so the update corrects them)."""
    return torch.tensor([v < current and p in trained for v, p in zip(versions, policies)], dtype=torch.bool)
