"""Training-side math: the SRPO objective, its baselines, advantages and event-atomic batching.

Names are imported on first use, so `srpo_dsl.rl.names` (read by the CLI) does not pay
for torch.
"""

from __future__ import annotations

from srpo_dsl.lazy import lazy_exports

_EXPORTS = {
    "setwise_loss": "objectives",
    "get_objective": "objectives",
    "register_policy_loss": "objectives",
    "OBJECTIVES": "objectives",
    "aggregate": "aggregation",
    "group_advantages": "advantages",
    "event_advantages": "advantages",
    "get_advantage_estimator": "advantages",
    "register_advantage_estimator": "advantages",
    "ADVANTAGE_ESTIMATORS": "advantages",
    "set_reduction_scale": "objective",
    "plan_batches": "batching",
    "drop_incomplete": "batching",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
