"""The policy losses: SRPO and the paper's baselines behind one call signature.

An objective is its per-unit terms (`terms(batch, config) -> PolicyTerms`, setwise.py), the
aggregation that turns them into J over the GLOBAL count of the unit (aggregation.py), and the
advantage estimator it trains on (advantages.py):

    name    terms                                        aggregation   advantages
    srpo    one ratio and clip per event (c(K_e) sum)    event-mean    event (prompt x event type, per event)
    grpo    one ratio and clip per token                 token-mean    row   (prompt x event type, per row)
    seq     one ratio and clip per row (srpo, K_e = 1)   row-mean      row
    drmas   as grpo                                      token-mean    agent (prompt x role, per row)
    traj    srpo with the EPISODE as the set             episode-mean  episode (prompt, per episode)

They are the entries of `srpo_dsl.registries.OBJECTIVES` (built-ins by import path, so the
option schema reads the names without torch); `@register_policy_loss(name, aggregation=...,
advantage=...)` adds one, and a workflow may name a user's terms function instead (plugins.py).
Every objective optionally adds a KL penalty to a frozen reference (k3 estimator), a token
mean over `num_tokens`, off by default. The entropy bonus is the update's (`rl/loop/update.py`):
the objective sees detached log-probs, through which no entropy gradient could flow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Concatenate, ParamSpec

import torch
from torch import Tensor

from srpo_dsl.registries import OBJECTIVES
from srpo_dsl.rl.objective.advantages import AdvantageInputs, Estimator, get_advantage_estimator
from srpo_dsl.rl.objective.aggregation import aggregate, get_aggregation
from srpo_dsl.rl.objective.setwise import (
    MAX_LOG_RATIO,
    LossConfig,
    PolicyBatch,
    PolicyTerms,
    at_least_fp32,
    clipped_terms,
    importance_weights,
    setwise_terms,
    token_log_ratio,
)

Metrics = dict[str, float]
TermsFn = Callable[[PolicyBatch, LossConfig], PolicyTerms]


P = ParamSpec("P")


def _without_terms(
    evaluate: Callable[Concatenate[Objective, P], tuple[Tensor, Metrics, PolicyTerms]],
) -> Callable[Concatenate[Objective, P], tuple[Tensor, Metrics]]:
    """Calling an objective: (loss, metrics) of its `evaluate` (same arguments), without its terms."""

    def __call__(self: Objective, /, *args: P.args, **kwargs: P.kwargs) -> tuple[Tensor, Metrics]:
        loss, metrics, _ = evaluate(self, *args, **kwargs)
        return loss, metrics

    return __call__


@dataclass(frozen=True)
class Objective:
    """A policy loss: its per-unit terms, how they are averaged, which advantages it trains on."""

    name: str  # a registered name, or the reference of a user's function
    terms: TermsFn
    aggregation: str  # a mode of AGGREGATIONS
    advantage: str  # an estimator of ADVANTAGE_ESTIMATORS, or the reference of a user's function
    estimator: Estimator  # the function `advantage` names

    def evaluate(
        self,
        logprobs: Tensor,
        old_logprobs: Tensor,
        response_mask: Tensor,
        event_ids: Tensor,
        advantages: Tensor,
        *,
        clip_eps: float = 0.2,
        set_norm: str = "sqrt",
        num_events: int | None = None,
        num_tokens: int | None = None,
        num_rows: int | None = None,
        ref_logprobs: Tensor | None = None,
        kl_coef: float = 0.0,
        behavior_logprobs: Tensor | None = None,
        importance_cap: float = 2.0,
        episode_ids: Tensor | None = None,
        num_episodes: int | None = None,
    ) -> tuple[Tensor, Metrics, PolicyTerms]:
        """(-J + kl_coef * KL, metrics, per-unit terms) on one micro-batch.

        [B, T] log-probs (current, old = the ratio's denominator) and mask, [B] event ids and
        advantages; episode_ids ([B], equal id = one episode) for losses over episodes (traj).
        num_events / num_tokens / num_rows / num_episodes: GLOBAL counts of the optimizer step
        (each defaults to the count in this call); the loss reads the one of its aggregation,
        and num_tokens for the KL term. set_norm is checked for every loss
        and changes only the losses over sets (srpo, traj).
        behavior_logprobs: [B, T] log mu of the policy that sampled the rows; given, each unit's
        term is multiplied by its importance weight min(q_old / mu, importance_cap) on the unit's
        scale (detached), and the returned terms stay unweighted.
        """
        batch = PolicyBatch.of(
            logprobs, old_logprobs, response_mask, event_ids, advantages, behavior_logprobs, episode_ids
        )
        config = LossConfig(clip_eps, set_norm, importance_cap)
        terms = self.terms(batch, config)
        weights = importance_weights(batch, terms, config)
        metrics = terms.metrics() | ({} if weights is None else weights.metrics(terms.valid))
        unit = get_aggregation(self.aggregation).count
        given = {
            "num_events": num_events,
            "num_tokens": num_tokens,
            "num_rows": num_rows,
            "num_episodes": num_episodes,
        }[unit]
        metrics[unit] = local_count(unit, batch, terms, metrics["num_units"])
        values = terms.values if weights is None else terms.values * weights.values  # w * term
        objective = aggregate(values, self.aggregation, global_count(unit, given, metrics[unit]))
        penalty, extra = regularisers(batch, num_tokens, ref_logprobs, kl_coef)
        return -objective + penalty, metrics | extra, terms

    __call__ = _without_terms(evaluate)

    def advantages(self, inputs: AdvantageInputs, eps: float = 1e-6) -> Tensor:
        """[N] row advantages for this objective (its estimator)."""
        return self.estimator(inputs, eps)


def local_count(unit: str, batch: PolicyBatch, terms: PolicyTerms, num_units: float) -> float:
    """This call's own count of `unit`: the terms' valid units when they are that unit (tokens: [B, T]
    terms; events or episodes: terms over sets; rows: [B] terms), else counted from the batch."""
    dims, over_sets = terms.values.dim(), terms.unit_of_row is not None
    if unit == "num_rows":
        return num_units if dims == 1 and not over_sets else float(batch.mask.shape[0])
    if unit == "num_tokens":
        return num_units if dims == 2 else float(batch.mask.sum())
    if over_sets:
        return num_units
    return float(torch.unique(batch_episodes(batch) if unit == "num_episodes" else batch.event_ids).numel())


def global_count(unit: str, given: int | None, local: float) -> int:
    """The global count of `unit`: `given`, or the local count; ValueError when below the local one."""
    if given is None:
        return int(local)
    if given < local:
        raise ValueError(f"{unit}={given} is smaller than the {int(local)} in this call")
    return given


get_objective = OBJECTIVES.lookup


def policy_loss(name: str, terms: TermsFn, *, aggregation: str, advantage: str) -> Objective:
    """The objective `name` of `terms`; an unknown aggregation or estimator is a ValueError now, not at
    the first step."""
    get_aggregation(aggregation)
    return Objective(name, terms, aggregation, advantage, get_advantage_estimator(advantage))


def register_policy_loss(name: str, *, aggregation: str, advantage: str) -> Callable[[TermsFn], TermsFn]:
    """Register `terms(batch, config) -> PolicyTerms` as the objective `name`."""
    if name in OBJECTIVES:
        raise ValueError(f"objective {name!r} is registered twice")
    get_aggregation(aggregation)
    get_advantage_estimator(advantage)

    def register(terms: TermsFn) -> TermsFn:
        OBJECTIVES.add(name, policy_loss(name, terms, aggregation=aggregation, advantage=advantage))
        return terms

    return register


def token_terms(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """GRPO: r_iu = exp(log q_cur - log q_old) per token, clipped per token, [B, T] terms."""
    log_ratio = token_log_ratio(batch)
    adv = batch.advantages.detach().to(log_ratio.dtype)[:, None]
    return clipped_terms(log_ratio, adv, config.clip_eps, batch.mask)


def member_terms(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """Sequence level: one ratio and one clip per row, [B] terms (srpo with every row its own event)."""
    rows = torch.arange(batch.event_ids.numel(), device=batch.event_ids.device)
    return setwise_terms(replace(batch, event_ids=rows), config)


def batch_episodes(batch: PolicyBatch) -> Tensor:
    """[B] the episode of each row; a ValueError naming the missing input when the call gave none."""
    if batch.episode_ids is None:
        raise ValueError(
            "a loss over episodes (traj, episode-mean) needs episode_ids: [B] ints, equal id = one episode"
        )
    return batch.episode_ids


def trajectory_terms(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """Trajectory level: SRPO with the episode as one set, [E] terms over episodes (in sorted id order):
    one ratio exp(c(K) * the sum of all its rows' l), K its rows, one clip and one advantage."""
    terms = setwise_terms(replace(batch, event_ids=batch_episodes(batch)), config)
    return replace(terms, sets="episodes")


SRPO = policy_loss("srpo", setwise_terms, aggregation="event-mean", advantage="event")
GRPO = policy_loss("grpo", token_terms, aggregation="token-mean", advantage="row")
SEQ = policy_loss("seq", member_terms, aggregation="row-mean", advantage="row")
DRMAS = policy_loss("drmas", token_terms, aggregation="token-mean", advantage="agent")
TRAJ = policy_loss("traj", trajectory_terms, aggregation="episode-mean", advantage="episode")


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Per-token KL(cur || ref) estimate exp(d) - d - 1 with d = ref - cur; 0 off the mask."""
    d = torch.where(mask, at_least_fp32(ref_logprobs.detach()) - at_least_fp32(logprobs), 0.0)
    d = d.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return d.exp() - d - 1.0


def regularisers(
    batch: PolicyBatch,
    num_tokens: int | None,
    ref_logprobs: Tensor | None,
    kl_coef: float,
) -> tuple[Tensor | float, Metrics]:
    """kl_coef * KL, a token mean over the global `num_tokens`, and its metric."""
    if kl_coef and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    if ref_logprobs is None:
        return 0.0, {}
    tokens = global_count("num_tokens", num_tokens, float(batch.mask.sum()))
    kl = aggregate(k3_kl(batch.logprobs, ref_logprobs, batch.mask), "token-mean", tokens)
    return kl_coef * kl, {"kl": kl.item()}


def setwise_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    response_mask: Tensor,
    event_ids: Tensor,
    advantages: Tensor,
    *,
    clip_eps: float = 0.2,
    set_norm: str = "sqrt",
    num_events: int | None = None,
    behavior_logprobs: Tensor | None = None,
    importance_cap: float = 2.0,
) -> tuple[Tensor, Metrics]:
    """Return (-J, metrics) of docs/objective.md §1: one ratio and one clip per decision event.

    logprobs, old_logprobs: [B, T] log-probs of the generated tokens (current, and the
        ratio's denominator: the proximal policy, or the behaviour when not recomputed).
    response_mask: [B, T] bool or 0/1, true on generated tokens only.
    event_ids: [B] ints, equal id = one event (any values, need not be contiguous).
    advantages: [B], the event advantage A_e repeated on every member (else ValueError).
    set_norm: "sqrt" | "mean" | "none", the set reduction c(K) = K^-1/2 | 1/K | 1.
    num_events: |B|, the global event count of the optimizer step (data parallel /
        micro-batches); default: the number of events in this call.
    behavior_logprobs: [B, T] log mu of the policy that sampled the rows (stale weights), or
        None; given, each event's term is multiplied by its truncated importance weight
        w_e = min(exp(c(K_e) sum_j sum_u m (old - mu)), importance_cap), detached.
    metrics: clip_fraction, num_events, mean_set_size, ratio_mean, log_ratio_abs_max (and,
        with behavior_logprobs, importance_weight_mean and importance_capped_fraction).
    """
    srpo: Objective = OBJECTIVES["srpo"]
    return srpo(
        logprobs,
        old_logprobs,
        response_mask,
        event_ids,
        advantages,
        clip_eps=clip_eps,
        set_norm=set_norm,
        num_events=num_events,
        behavior_logprobs=behavior_logprobs,
        importance_cap=importance_cap,
    )
