"""The training stage's fixed choices, in one place that imports nothing heavy.

These are settings of srpo-dsl itself, not extension points: what plugins extend (objectives,
aggregations, advantage estimators, set norms, rollout engines) are the registries of
`srpo_dsl.registries`. The CLI choices read both.
"""

from __future__ import annotations

OFFLOAD = ("none", "optimizer", "params", "all")  # ZeRO offload to CPU (engine.py)
