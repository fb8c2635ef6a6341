"""Training: the objective (`objective`), this process among the others (`distributed`), models as
engines (`engines`), asynchronous rollouts (`transport`) and the run itself (`loop`), each sub-package's
docstring says what it holds and what it may import (tests/project/test_layers.py checks it).

The objective's public names are exported here, imported on first use, so importing `srpo_dsl.rl`
pays for no torch.
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
