"""The routed toy team's router (`toy_routed.srpo`): an environment that chooses how many solvers answer.

`route(outputs, row, state, widest)` is stepped once per episode, before anyone acts (`step router`).
It selects the first K of the `widest` solvers, K = 1 + crc32(question) mod `widest`: every question
has its own K, the same in all its rollouts and runs (a hash, not a draw, so paired runs see the
same sets), and over the task's questions K is spread evenly from 1 to `widest`. The team's events
therefore hold 1 to 4 solvers, which is what the set norm c(K) weighs.
"""

from __future__ import annotations

import zlib


def route(outputs: dict, row: dict, state: dict, widest: int = 4):
    """(no observations, done, no reward, {"solver": the replicas that answer this question})."""
    k = 1 + zlib.crc32(row["question"].encode()) % widest
    return {}, True, 0.0, {"solver": list(range(1, k + 1))}
