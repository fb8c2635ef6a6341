"""How old the weights behind an episode are, and the bound S on it (asynchronous rollouts).

A policy's version counts the optimizer steps its weights have had; the trainer about to take
step t holds version t - 1. A member generated with version v is t - 1 - v steps stale. With
`rollout_weights = newest` an episode's members may carry several versions (a worker takes each
new version before its next generation call); the bound applies to the episode as a whole, by its
oldest trained member (frozen policies never change: they do not count). An episode staler than
`max_staleness` is dropped whole and counted, never trained on: its events share its return and
its group's baseline, so keeping its fresh events alone would train on a return whose early
decisions were never judged, and favour the late events of long episodes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch

from srpo_dsl.runtime.episode import Episode


def trained_versions(episode: Episode, trained: Collection[str]) -> set[int]:
    """The versions of the episode's trained members (its tries too: they were generated as well)."""
    events = episode.events
    return {m.policy_version for e in events for m in [*e.members, *e.tries] if m.policy in trained}


def episode_staleness(episode: Episode, current: int, trained: Collection[str]) -> int:
    """Steps between `current` and the oldest version of the episode's trained members (0: none)."""
    versions = trained_versions(episode, trained)
    return current - min(versions) if versions else 0


@dataclass(frozen=True)
class Fresh:
    """The episodes within the bound, their staleness, their number of versions, and how many were
    dropped."""

    episodes: list[Episode]
    staleness: list[int]
    dropped: int
    versions: list[int]  # per kept episode, the distinct versions of its trained members (1 when none)

    def metrics(self) -> dict[str, float]:
        """`staleness_mean`, `staleness_max`, `versions_per_episode` (the mean over the kept episodes)
        and `dropped_episodes`."""
        values, versions = self.staleness or [0], self.versions or [1]
        return {
            "staleness_mean": sum(values) / len(values),
            "staleness_max": float(max(values)),
            "versions_per_episode": sum(versions) / len(versions),
            "dropped_episodes": float(self.dropped),
        }


def within_bound(episodes: Sequence[Episode], current: int, limit: int, trained: Collection[str]) -> Fresh:
    """The episodes at most `limit` steps stale at version `current` (by their oldest trained member),
    in order; the others dropped."""
    staleness = [episode_staleness(ep, current, trained) for ep in episodes]
    kept = [i for i, s in enumerate(staleness) if s <= limit]
    versions = [max(1, len(trained_versions(episodes[i], trained))) for i in kept]
    dropped = len(episodes) - len(kept)
    return Fresh([episodes[i] for i in kept], [staleness[i] for i in kept], dropped, versions)


def stale_rows(
    versions: Sequence[int], policies: Sequence[str], current: int, trained: Collection[str]
) -> torch.Tensor:
    """[N] bool: rows of a trained policy generated with weights older than `current` (their behaviour
    policy is not the proximal one, so the update corrects them)."""
    return torch.tensor([v < current and p in trained for v, p in zip(versions, policies)], dtype=torch.bool)
