"""The names the training stage accepts, in one place that imports nothing heavy.

`TrainOptions` (pydantic), the CLI choices and the registries (which live in torch
modules) all read these tuples; each registry asserts at import that it registered
exactly its tuple, so a name cannot be added in one place and forgotten in another.
`srpo-dsl validate` reads them without importing torch.
"""

from __future__ import annotations

OBJECTIVES = ("srpo", "grpo", "seq", "drmas")  # policy losses (objectives.py)
SET_NORMS = ("sqrt", "mean", "none")  # SRPO's set reduction c(K) (objective.py)
AGGREGATIONS = ("event-mean", "token-mean", "row-mean")  # per-unit terms -> scalar (aggregation.py)
ADVANTAGE_ESTIMATORS = ("event", "row", "agent")  # group-relative advantages (advantages.py)
OLD_LOGPROBS = ("recompute", "rollout")  # where the behaviour log-probs come from
OFFLOAD = ("none", "optimizer", "params", "all")  # ZeRO offload to CPU (engine.py)
DEVICES = ("cpu", "cuda")
ROLLOUT_ENGINES = ("hf", "vllm")  # the backends `train` drives (`RolloutEngine`)


def require_exactly(registered: tuple[str, ...], names: tuple[str, ...], what: str) -> None:
    """Raise at import when a registry does not hold exactly `names`, in that order."""
    if registered != names:
        raise RuntimeError(f"{what}: registered {registered}, but rl/names.py lists {names}")
