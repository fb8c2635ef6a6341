"""The registries whose entries live in heavy modules, declared where nothing heavy is imported.

Each holds its built-in entries by import path (`srpo_dsl.registry.Registry`): the option schema,
the checker and the CLI read the names (`srpo-dsl validate` imports no torch), and a lookup imports
the entry's module. A plugin adds an entry with the registry's decorator, in its own module:

    registry              entry                                     added by (in srpo_dsl)
    OBJECTIVES            Objective (rl/objectives.py)              rl.objectives.register_policy_loss
    AGGREGATIONS          Aggregation (rl/aggregation.py)           rl.aggregation.register_aggregation
    ADVANTAGE_ESTIMATORS  (AdvantageInputs, eps) -> [N] Tensor      rl.advantages.register_advantage_estimator
    SET_NORMS             c(K): [E] set sizes -> [E] factors        SET_NORMS.register
    REWARDS               (pred, task, field) -> float              envs.rewards.register_reward
    BACKENDS              (model, **options) -> Backend: run, eval  BACKENDS.register
    ROLLOUT_ENGINES       (module, tokenizer, path, dist, decode)   ROLLOUT_ENGINES.register
                          -> RolloutEngine: train (rl/policies.py)

The language's own kinds (output contracts, task and tool kinds, policy kinds) are registries of
`srpo_dsl.lang.schema`, whose entries carry their option models.
"""

from __future__ import annotations

from typing import Any

from srpo_dsl.registry import Registry

OBJECTIVES: Registry[Any] = Registry(
    "objective",
    {
        "srpo": "srpo_dsl.rl.objectives:SRPO",
        "grpo": "srpo_dsl.rl.objectives:GRPO",
        "seq": "srpo_dsl.rl.objectives:SEQ",
        "drmas": "srpo_dsl.rl.objectives:DRMAS",
        "traj": "srpo_dsl.rl.objectives:TRAJ",
    },
)
AGGREGATIONS: Registry[Any] = Registry(
    "aggregation",
    {
        "event-mean": "srpo_dsl.rl.aggregation:EVENT_MEAN",
        "token-mean": "srpo_dsl.rl.aggregation:TOKEN_MEAN",
        "row-mean": "srpo_dsl.rl.aggregation:ROW_MEAN",
        "episode-mean": "srpo_dsl.rl.aggregation:EPISODE_MEAN",
    },
)
ADVANTAGE_ESTIMATORS: Registry[Any] = Registry(
    "advantage estimator",
    {
        "event": "srpo_dsl.rl.advantages:per_event",
        "row": "srpo_dsl.rl.advantages:per_row",
        "agent": "srpo_dsl.rl.advantages:per_agent",
        "episode": "srpo_dsl.rl.advantages:per_episode",
    },
)
SET_NORMS: Registry[Any] = Registry(
    "set norm",
    {
        "sqrt": "torch:rsqrt",  # c(K) = K^-1/2
        "mean": "torch:reciprocal",  # c(K) = 1/K
        "none": "torch:ones_like",  # c(K) = 1
    },
)
REWARDS: Registry[Any] = Registry(
    "reward function",
    {
        "math_equiv": "srpo_dsl.envs.rewards:math_reward",
        "exact_match": "srpo_dsl.envs.rewards:exact_match_reward",
        "f1": "srpo_dsl.envs.rewards:f1_reward",
    },
)
BACKENDS: Registry[Any] = Registry(
    "backend",
    {
        "hf": "srpo_dsl.backends:open_hf",
        "scripted": "srpo_dsl.backends:open_scripted",
        "vllm": "srpo_dsl.backends:open_vllm",
    },
)
ROLLOUT_ENGINES: Registry[Any] = Registry(
    "rollout engine",
    {
        "hf": "srpo_dsl.rl.policies:hf_engine",
        "vllm": "srpo_dsl.rl.policies:vllm_engine",
    },
)
