"""Reward functions by name (the names the language accepts): `fn(pred, task, field) -> float`.

`pred` is the rewarded agent's parsed answer, or None when its output broke the contract
(score 0; the invalid-action penalty is the executor's). `field` names the task field
holding the gold answer: a string or a list of accepted answers.

They are the entries of `srpo_dsl.registries.REWARDS` (the checker reads the names there, by
import path here); `@register_reward(name)` adds one. math-verify (sympy) is imported when
`math_equiv` first scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from srpo_dsl.envs.answers import exact_match, f1
from srpo_dsl.registries import REWARDS

RewardFn = Callable[[str | None, dict, str], float]
register_reward = REWARDS.register


def _golds(task: dict, field: str) -> list[str]:
    if field not in task:
        raise KeyError(f"task {task.get('id')!r} has no field {field!r} (fields: {', '.join(task)})")
    gold = task[field]
    return [str(g) for g in gold] if isinstance(gold, Sequence) and not isinstance(gold, str) else [str(gold)]


def math_reward(pred: str | None, task: dict, field: str) -> float:
    """1.0 when `pred` is mathematically equivalent to any gold answer."""
    from srpo_dsl.envs.math import math_equiv  # math-verify and sympy: only when math is scored

    return float(pred is not None and any(math_equiv(pred, g) for g in _golds(task, field)))


def exact_match_reward(pred: str | None, task: dict, field: str) -> float:
    return exact_match(pred, _golds(task, field))


def f1_reward(pred: str | None, task: dict, field: str) -> float:
    return f1(pred, _golds(task, field))
