"""Reward functions by name (the names the language accepts): `fn(pred, task, field) -> float`.

`pred` is the rewarded agent's parsed answer, or None when its output broke the contract
(score 0; the invalid-action penalty is the executor's). `field` names the task field
holding the gold answer: a string or a list of accepted answers.

This registry is the one list of reward names (`lang.schema.REWARD_FUNCTIONS` reads it), so
importing it stays light: math-verify (sympy) is imported when `math_equiv` first scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from srpo_dsl.envs.answers import exact_match, f1
from srpo_dsl.registry import Registry

RewardFn = Callable[[str | None, dict, str], float]


REWARDS: Registry[RewardFn] = Registry("reward function")
register_reward = REWARDS.register


def _golds(task: dict, field: str) -> list[str]:
    if field not in task:
        raise KeyError(f"task {task.get('id')!r} has no field {field!r} (fields: {', '.join(task)})")
    gold = task[field]
    return [str(g) for g in gold] if isinstance(gold, Sequence) and not isinstance(gold, str) else [str(gold)]


@register_reward("math_equiv")
def math_reward(pred: str | None, task: dict, field: str) -> float:
    """1.0 when `pred` is mathematically equivalent to any gold answer."""
    from srpo_dsl.envs.math import math_equiv  # math-verify and sympy: only when math is scored

    return float(pred is not None and any(math_equiv(pred, g) for g in _golds(task, field)))


@register_reward("exact_match")
def exact_match_reward(pred: str | None, task: dict, field: str) -> float:
    return exact_match(pred, _golds(task, field))


@register_reward("f1")
def f1_reward(pred: str | None, task: dict, field: str) -> float:
    return f1(pred, _golds(task, field))
