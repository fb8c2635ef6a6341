"""Training-side math: the SRPO objective, its baselines, advantages and event-atomic batching.

Names are imported on first use, so `srpo_dsl.rl.names` (read by the CLI) does not pay
for torch.
"""

from __future__ import annotations

from srpo_dsl.lazy import lazy_exports

_EXPORTS = {
    "setwise_loss": "objective.losses",
    "get_objective": "objective.losses",
    "register_policy_loss": "objective.losses",
    "OBJECTIVES": "objective.losses",
    "aggregate": "objective.aggregation",
    "group_advantages": "objective.advantages",
    "event_advantages": "objective.advantages",
    "get_advantage_estimator": "objective.advantages",
    "register_advantage_estimator": "objective.advantages",
    "ADVANTAGE_ESTIMATORS": "objective.advantages",
    "set_reduction_scale": "objective.setwise",
    "plan_batches": "objective.batching",
    "drop_incomplete": "objective.batching",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
