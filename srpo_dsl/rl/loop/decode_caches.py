"""The rollout engines' kept decode caches and compiles, across a run's policies: capped once before the
first step (`rl.engines.fit.decode_cache_cap`), reported every step (`decode/` metrics, `time/compile`)."""

from __future__ import annotations

from collections.abc import Mapping

from srpo_dsl.backends.base import KeepsDecodeCaches
from srpo_dsl.rl.engines.policies import TrainingPolicy


def keepers(policies: Mapping[str, TrainingPolicy]) -> list[KeepsDecodeCaches]:
    """Each distinct rollout engine that keeps decode caches (adapters share their base's engine)."""
    engines = {id(p.backend): p.backend for p in policies.values()}
    return [b for b in engines.values() if isinstance(b, KeepsDecodeCaches)]


def cap_caches(policies: Mapping[str, TrainingPolicy], nbytes: float | None) -> None:
    """Split `nbytes` (None: no cap) evenly between the engines that keep caches."""
    engines = keepers(policies)
    if nbytes is not None and engines:
        for engine in engines:
            engine.cap_decode_caches(nbytes / len(engines))


def compile_seconds(policies: Mapping[str, TrainingPolicy]) -> float:
    """Seconds the engines have spent compiling decode steps so far."""
    return sum(e.decode_stats()["compile_s"] for e in keepers(policies))


def decode_metrics(policies: Mapping[str, TrainingPolicy]) -> dict[str, float]:
    """`decode/shapes` (decode steps compiled so far), `decode/cache_gib` (static caches kept now); none
    when no engine keeps caches."""
    stats = [e.decode_stats() for e in keepers(policies)]
    if not stats:
        return {}
    return {
        "decode/shapes": sum(s["decode_shapes"] for s in stats),
        "decode/cache_gib": sum(s["cache_bytes"] for s in stats) / 2**30,
    }
