"""The objective a run trains with, and the user's Python it may name for its parts.

`train with (objective = "file.py:function", aggregation = ..., advantage = ...)`: the objective is a
registered name (losses.py) or a user's terms function, the advantage estimator a registered
name or a user's estimator (files relative to the workflow's folder). `validate` checks the
references with `ast` (lang/usercode/pycode.py); `train` imports them here, once, and checks what they
return, so a wrong return is one line naming the user's file:line:

    objective(batch: PolicyBatch, config: LossConfig) -> PolicyTerms     (setwise.py)
    advantage(inputs: AdvantageInputs, eps: float) -> [N] float Tensor   (advantages.py)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor

from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.usercode.pycode import CodeRef, UseName, is_reference, locate_ref
from srpo_dsl.lang.usercode.pysource import RefProblem
from srpo_dsl.rl.objective.advantages import AdvantageInputs, get_advantage_estimator
from srpo_dsl.rl.objective.aggregation import get_aggregation
from srpo_dsl.rl.objective.losses import Objective, get_objective, policy_loss
from srpo_dsl.rl.objective.setwise import LossConfig, PolicyBatch, PolicyTerms
from srpo_dsl.runtime.usercode import load_function, shorten

PYTHON_OBJECTIVE_ADVANTAGE = "row"  # a Python objective's estimator unless `advantage` names one


def described(value: object) -> str:
    """A tensor by its shape and dtype, anything else by its shortened repr."""
    if isinstance(value, Tensor):
        return f"a {value.dtype} Tensor of shape {tuple(value.shape)}"
    return shorten(value)


def terms_problem(terms: object, batch: PolicyBatch, aggregation: str) -> str | None:
    """Why `terms` cannot be aggregated by `aggregation` over `batch`'s rows; None when it can."""
    if not isinstance(terms, PolicyTerms):
        return (
            f"returned {described(terms)}: an objective returns PolicyTerms (srpo_dsl.rl.objective.setwise)"
        )
    values, dims = terms.values, get_aggregation(aggregation).dims
    if not isinstance(values, Tensor) or not values.is_floating_point():
        return f"returned values {described(values)}: the terms are a float Tensor"
    if values.dim() != dims:
        return (
            f"returned terms of shape {tuple(values.shape)}, but its aggregation `{aggregation}` sums "
            f"{dims}-d terms (set `aggregation` in the train block)"
        )
    for field in ("clipped", "ratio", "log_ratio", "valid"):
        part = getattr(terms, field)
        if not isinstance(part, Tensor) or part.shape != values.shape:
            shape = tuple(values.shape)
            return f"returned `{field}` {described(part)}: each field has the shape of `values` {shape}"
    if terms.clipped.dtype != torch.bool or terms.valid.dtype != torch.bool:
        return "returned `clipped` or `valid` that is not a bool Tensor"
    rows = batch.mask.shape[0]
    if dims == 2 and values.shape != batch.mask.shape:
        shapes = f"{tuple(values.shape)} for a [B, T] batch of {tuple(batch.mask.shape)}"
        return f"returned token terms of shape {shapes}"
    if dims == 1 and terms.unit_of_row is None and values.shape[0] != rows:
        return f"returned {values.shape[0]} terms for {rows} rows: terms over sets give `unit_of_row`"
    if batch.logprobs.requires_grad and not values.requires_grad:
        return "returned terms that do not depend on batch.logprobs: no gradient would reach the policy"
    return None


class UserTerms:
    """A user's terms function `(batch, config) -> PolicyTerms`, its result checked at every call."""

    def __init__(self, ref: CodeRef, aggregation: str):
        self.fn = load_function(ref)
        self.aggregation = aggregation

    def __call__(self, batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
        rows = batch.mask.shape[0]
        terms = self.fn(batch, config, about=lambda: f"a batch of {rows} rows")
        problem = terms_problem(terms, batch, self.aggregation)
        if problem:
            raise self.fn.fail(problem)
        assert isinstance(terms, PolicyTerms)  # `terms_problem` checked it
        return terms


class UserEstimator:
    """A user's estimator `(inputs, eps) -> [N]`, its result checked at every call."""

    def __init__(self, ref: CodeRef):
        self.fn = load_function(ref)

    def __call__(self, inputs: AdvantageInputs, eps: float = 1e-6) -> Tensor:
        n = inputs.returns.numel()
        value = self.fn(inputs, eps, about=lambda: f"the returns of {n} rows")
        if not isinstance(value, Tensor) or value.shape != (n,) or not value.is_floating_point():
            raise self.fn.fail(
                f"returned {described(value)} for {n} rows: an estimator returns a [N] float Tensor"
            )
        if not bool(value.isfinite().all()):
            raise self.fn.fail(f"returned non-finite advantages for {n} rows")
        return value


def locate(text: str, use: UseName, folder: Path) -> CodeRef:
    """The function a training option names (read with `ast`); a one-line ValueError if it is not there."""
    try:
        return locate_ref(text, use, folder).ref
    except RefProblem as problem:
        hint = f" ({problem.hint})" if problem.hint else ""
        raise ValueError(
            f"training option `{use}` = {text!r}: error[{problem.code}]: {problem}{hint}"
        ) from None


def training_objective(opts: TrainOptions, folder: Path) -> Objective:
    """The objective `opts` trains with: registered or a user's terms function, aggregated as `opts`
    say (default: the objective's own), trained on the estimator `opts` name (default: its own; a
    Python objective's: `row`). User functions are located in `folder` and imported here."""
    if is_reference(opts.objective):
        aggregation = opts.aggregation or ""  # TrainOptions requires one with a Python objective
        terms = UserTerms(locate(opts.objective, "objective", folder), aggregation)
        own = policy_loss(
            opts.objective, terms, aggregation=aggregation, advantage=PYTHON_OBJECTIVE_ADVANTAGE
        )
    else:
        own = get_objective(opts.objective)
    advantage = opts.advantage or own.advantage
    aggregation = opts.aggregation or own.aggregation
    check_episode_advantage(own, advantage)
    if is_reference(advantage):
        estimator = UserEstimator(locate(advantage, "advantage", folder))
    else:
        estimator = get_advantage_estimator(advantage)
    return replace(own, aggregation=aggregation, advantage=advantage, estimator=estimator)


def check_episode_advantage(own: Objective, advantage: str) -> None:
    """A registered objective over episodes (traj) takes one advantage per episode: its own estimator
    (`episode`) or a Python one (checked at every step); another registered one (`event`, `row`, `agent`)
    gives an episode's events different advantages: a one-line ValueError before anything runs."""
    registered_over_episodes = (
        not is_reference(own.name) and get_aggregation(own.aggregation).count == "num_episodes"
    )
    if registered_over_episodes and not is_reference(advantage) and advantage != own.advantage:
        raise ValueError(
            f"training option `advantage` = {advantage!r}: objective `{own.name}` gives each episode one "
            f"advantage, so it trains on `{own.advantage}` (one per episode) or a Python estimator"
        )
