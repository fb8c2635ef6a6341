"""SRPO's setwise objective (docs/objective.md §1) as per-event terms, and the ratio pieces all losses share.

For member j of decision event e (a row of the batch), with generated-token mask m:

    l_ej   = sum_u m_eju * (log q_cur - log q_old)          sequence log-ratio of a member
    L_e    = c(K_e) * sum_j l_ej                            set log-ratio, c(K) = K^-1/2 | 1/K | 1
    rho_e  = exp(L_e)
    term_e = min(rho_e A_e, clip(rho_e, 1-eps, 1+eps) A_e)

J = 1/|B| * sum_e term_e is the event-mean of these terms (aggregation.py); the loss is -J.
q_old is the proximal policy (the weights before this update). When the rows were sampled by
another policy mu (asynchronous rollouts, stale weights), each unit's term is also multiplied
by its truncated importance weight, detached (docs/objective.md §8):

    w_e    = min(exp(c(K_e) * sum_j sum_u m_eju * (log q_old - log mu)), C)

These types are also the plugin interface: a policy loss is `terms(batch: PolicyBatch, config:
LossConfig) -> PolicyTerms` (docs/objective.md, "Your own objective").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from srpo_dsl.registries import SET_NORMS

MAX_LOG_RATIO = 20.0  # |log rho| is clamped here before exp: rho in [e^-20, e^20]


def check_set_norm(set_norm: str) -> None:
    if set_norm not in SET_NORMS:
        raise ValueError(f"set_norm must be one of {', '.join(SET_NORMS)}, got {set_norm!r}")


def set_reduction_scale(k: Tensor, set_norm: str) -> Tensor:
    """c(K_e), the factor applied to the summed member log-ratios of each event (`SET_NORMS`)."""
    check_set_norm(set_norm)
    scale: Tensor = SET_NORMS[set_norm](k)  # a torch function of the registry
    return scale


def at_least_fp32(x: Tensor) -> Tensor:
    """bf16/fp16 -> fp32 (sums over long sequences); fp32 and fp64 unchanged."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


@dataclass(frozen=True)
class LossConfig:
    """The settings a policy loss reads; `set_norm` only changes losses with sets (srpo)."""

    clip_eps: float
    set_norm: str
    importance_cap: float = 2.0  # C, the truncation of an importance weight: >= 1 (inf: none)

    def __post_init__(self) -> None:
        check_set_norm(self.set_norm)
        if not self.clip_eps >= 0.0:
            raise ValueError(f"clip_eps must be >= 0, got {self.clip_eps}")
        if not self.importance_cap >= 1.0:
            cap = self.importance_cap
            raise ValueError(f"importance_cap must be >= 1 (an on-policy weight, 1, is never cut), got {cap}")


@dataclass(frozen=True)
class PolicyBatch:
    """One call's inputs: [B, T] log-probs and bool mask; [B] event ids and advantages.

    old_logprobs is the ratio's denominator (the proximal policy when recomputed);
    behavior_logprobs, when given, the policy that sampled the rows (mu), for the
    importance weights; None: no correction. episode_ids, when given, the episode of each row
    (equal id = one episode), for losses over episodes (traj).
    """

    logprobs: Tensor
    old_logprobs: Tensor
    mask: Tensor
    event_ids: Tensor
    advantages: Tensor
    behavior_logprobs: Tensor | None = None
    episode_ids: Tensor | None = None

    @classmethod
    def of(
        cls,
        logprobs: Tensor,
        old_logprobs: Tensor,
        response_mask: Tensor,
        event_ids: Tensor,
        advantages: Tensor,
        behavior_logprobs: Tensor | None = None,
        episode_ids: Tensor | None = None,
    ) -> PolicyBatch:
        """Check the shapes (ValueError) and make the mask bool."""
        same = {"old_logprobs": old_logprobs, "response_mask": response_mask}
        if behavior_logprobs is not None:
            same["behavior_logprobs"] = behavior_logprobs
        if logprobs.dim() != 2 or any(x.shape != logprobs.shape for x in same.values()):
            shapes = ", ".join(f"{name} {tuple(x.shape)}" for name, x in same.items())
            raise ValueError(
                f"logprobs must be [B, T] and {', '.join(same)} of its shape, got "
                f"logprobs {tuple(logprobs.shape)}, {shapes}"
            )
        per_row = {"event_ids": event_ids, "advantages": advantages, "episode_ids": episode_ids}
        if any(x is not None and x.shape != logprobs.shape[:1] for x in per_row.values()):
            shapes = ", ".join(f"{name} {tuple(x.shape)}" for name, x in per_row.items() if x is not None)
            raise ValueError(
                f"event_ids, advantages and episode_ids must be [B]=[{logprobs.shape[0]}], got {shapes}"
            )
        mask = response_mask.bool()
        return cls(logprobs, old_logprobs, mask, event_ids, advantages, behavior_logprobs, episode_ids)


@dataclass(frozen=True)
class PolicyTerms:
    """Per-unit surrogate terms of J (a unit is an event, a token or a row) and what the metrics read."""

    values: Tensor  # min(rho A, clip(rho) A); exactly 0 on units that are not valid
    clipped: Tensor  # bool: the clipped term is the minimum (zero gradient)
    ratio: Tensor  # rho, after the clamp
    log_ratio: Tensor  # log rho, before the clamp
    valid: Tensor  # bool: a real unit (tokens: the mask; events and rows: all)
    set_size: Tensor | None = None  # K_e per event, for losses over sets
    unit_of_row: Tensor | None = None  # [B] each row's unit, for [E] terms over sets; else None
    sets: str = "events"  # what the sets are (the metric num_<sets>): events, or episodes for traj

    def row_clips(self, num_rows: int, event_ids: Tensor | None = None) -> Tensor:
        """[B, 2] (clipped units, units) per row, to key the clip fraction by a row's role or event type.

        Token terms: the row's clipped tokens and tokens. Terms over sets or rows: a unit counts
        once, on its first row (a set's rows share its role and event type); with `event_ids`, once
        per event it spans, on the event's first row (a set of several events, traj's episode: each
        event counts its set's clip).
        """
        with torch.no_grad():
            clipped = self.clipped & self.valid
            unit = self.unit_of_row
            if unit is None:
                unit = torch.arange(clipped.shape[0], device=clipped.device)
            if unit.numel() != num_rows:
                raise ValueError(f"terms of {unit.numel()} rows for {num_rows} rows: sets need `unit_of_row`")
            if clipped.dim() == 2:
                return torch.stack([clipped.sum(-1), self.valid.sum(-1)], -1).double()
            key = unit
            if event_ids is not None:  # one key per (unit, event) pair
                key = torch.unique(
                    torch.stack([unit, event_ids.to(unit.device)]), dim=1, return_inverse=True
                )[1]
            rows = torch.arange(num_rows, device=unit.device)
            first = torch.full((num_rows,), num_rows, dtype=torch.long, device=unit.device)
            first = first.scatter_reduce(0, key, rows, "amin")
            is_first = first[key] == rows
            return torch.stack([clipped[unit] & is_first, self.valid[unit] & is_first], -1).double()

    def metrics(self) -> dict[str, float]:
        """Means over the valid units, their count and, with sets, the set sizes: one device sync."""
        with torch.no_grad():
            n = self.valid.sum()
            per_unit = n.clamp(min=1)
            abs_log_ratio = torch.where(self.valid, self.log_ratio.abs(), 0.0)
            stats = [
                n,
                (self.clipped & self.valid).sum() / per_unit,
                torch.where(self.valid, self.ratio, 0.0).sum() / per_unit,
                abs_log_ratio.amax() if abs_log_ratio.numel() else abs_log_ratio.new_zeros(()),
            ]
            if self.set_size is not None:
                stats.append(self.set_size.sum() / per_unit)
            values = torch.stack([s.double() for s in stats]).tolist()
        metrics = dict(zip(("num_units", "clip_fraction", "ratio_mean", "log_ratio_abs_max"), values))
        if self.set_size is not None:
            metrics |= {f"num_{self.sets}": values[0], "mean_set_size": values[4]}
        return metrics


def masked_log_ratio(numerator: Tensor, denominator: Tensor, mask: Tensor) -> Tensor:
    """numerator - denominator per token, [B, T], at least fp32, exactly 0 off the mask.

    Masking is a select (torch.where), not a product, so whatever sits in masked
    positions (-1e9, inf, nan) never reaches the value or the gradient.
    """
    log_ratio = at_least_fp32(numerator) - at_least_fp32(denominator.detach())
    return torch.where(mask, log_ratio, 0.0)


def token_log_ratio(batch: PolicyBatch) -> Tensor:
    """log q_cur - log q_old per token, [B, T], at least fp32, exactly 0 off the mask."""
    return masked_log_ratio(batch.logprobs, batch.old_logprobs, batch.mask)


def clipped_terms(
    log_ratio: Tensor,
    advantages: Tensor,
    clip_eps: float,
    valid: Tensor,
    set_size: Tensor | None = None,
    unit_of_row: Tensor | None = None,
) -> PolicyTerms:
    """min(rho A, clip(rho, 1-eps, 1+eps) A) per unit, from log rho (clamped before exp)."""
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantages
    term = torch.where(valid, torch.minimum(unclipped, clipped), 0.0)
    return PolicyTerms(term, clipped < unclipped, ratio, log_ratio, valid, set_size, unit_of_row)


def event_values(row_values: Tensor, inverse: Tensor, num_events: int) -> Tensor:
    """The one value of each event (each set) from its rows' copies, [B] -> [E]; ValueError unless they
    agree."""
    low = row_values.new_full((num_events,), float("inf")).scatter_reduce(0, inverse, row_values, "amin")
    high = row_values.new_full((num_events,), float("-inf")).scatter_reduce(0, inverse, row_values, "amax")
    if not torch.equal(low, high):
        raise ValueError(
            "advantages must be equal for all members of an event (for traj: all rows of an episode, "
            "as the `episode` estimator gives them)"
        )
    return low


def set_log_ratio(
    row_values: Tensor, unit_of_row: Tensor, num_sets: int, set_norm: str
) -> tuple[Tensor, Tensor]:
    """(c(K_e) * sum_j row_values_ej, K_e) per set, [B] -> [E]: a set's log-ratio from its members'."""
    k = torch.bincount(unit_of_row, minlength=num_sets).to(row_values.dtype)  # K_e
    total = row_values.new_zeros(num_sets).index_add(0, unit_of_row, row_values)  # sum_j
    return set_reduction_scale(k, set_norm) * total, k


def setwise_terms(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """SRPO: one ratio and one clip per decision event, [E] terms (events in sorted id order)."""
    events, inverse = torch.unique(batch.event_ids, return_inverse=True)
    num_events = events.numel()
    l_row = token_log_ratio(batch).sum(-1)  # l_ej
    adv_e = event_values(batch.advantages.detach().to(l_row.dtype), inverse, num_events)  # A_e
    l_set, k = set_log_ratio(l_row, inverse, num_events, config.set_norm)  # c(K_e) sum_j l_ej, K_e
    log_ratio = torch.nan_to_num(l_set, nan=0.0)  # L_e, no nan
    every_event = torch.ones_like(k, dtype=torch.bool)
    return clipped_terms(log_ratio, adv_e, config.clip_eps, every_event, set_size=k, unit_of_row=inverse)


@dataclass(frozen=True)
class ImportanceWeights:
    """The truncated importance weight of each unit of some terms (detached), and which were cut."""

    values: Tensor  # min(w, C), shaped and typed as the terms' values; exactly 1 where mu = q_old
    capped: Tensor  # bool: w > C, the weight was truncated to C

    def metrics(self, valid: Tensor) -> dict[str, float]:
        """importance_weight_mean and importance_capped_fraction over the valid units: one sync."""
        with torch.no_grad():
            per_unit = valid.sum().clamp(min=1).double()
            mean = torch.where(valid, self.values.double(), 0.0).sum() / per_unit
            capped = (self.capped & valid).sum() / per_unit
            values = torch.stack([mean, capped]).tolist()
        return dict(zip(("importance_weight_mean", "importance_capped_fraction"), values))


def unit_log_weights(token_log_w: Tensor, terms: PolicyTerms, set_norm: str) -> Tensor:
    """[B, T] token log-weights onto the units of `terms`, read from their shape: [B, T] terms per
    token; terms over sets (`unit_of_row`) c(K_e) times the set's sum, as L_e; [B] terms the row sum."""
    values, unit = terms.values, terms.unit_of_row
    if values.dim() == 2 and values.shape == token_log_w.shape:
        return token_log_w
    row = token_log_w.sum(-1)
    if values.dim() == 1 and unit is None and values.shape == row.shape:
        return row
    if values.dim() == 1 and unit is not None and unit.shape == row.shape:
        return set_log_ratio(row, unit, values.shape[0], set_norm)[0]
    raise ValueError(
        f"importance weights need [B, T] token terms, [B] row terms or [E] terms over sets with "
        f"`unit_of_row`; got terms of shape {tuple(values.shape)} for a batch of {tuple(row.shape)} rows"
    )


def behavior_of_rows(stale: Tensor, recorded: Tensor, proximal: Tensor) -> Tensor:
    """[B, T] mu per row: a `stale` row's own recorded log-probs (the version that generated that member),
    a fresh row's the proximal ones, so its log-weight is exactly 0. Rows of one event may differ: the
    event's weight sums each member's own log q_prox - log mu under c(K_e)."""
    return torch.where(stale[:, None], recorded.to(proximal.device), proximal)


def importance_weights(
    batch: PolicyBatch, terms: PolicyTerms, config: LossConfig
) -> ImportanceWeights | None:
    """min(exp(log q_old - log mu, summed onto each unit of `terms`), C), detached; None without mu.

    The log-weight is taken on the unit's scale (c(K_e) for sets, as L_e), made finite and clamped to
    +-MAX_LOG_RATIO like the ratio: 0 where behaviour = old, hence a weight of exactly 1.
    """
    if batch.behavior_logprobs is None:
        return None
    with torch.no_grad():
        token_log_w = masked_log_ratio(batch.old_logprobs, batch.behavior_logprobs, batch.mask)
        log_w = torch.nan_to_num(unit_log_weights(token_log_w, terms, config.set_norm), nan=0.0)
        weight = log_w.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()  # w
        truncated = weight.clamp(max=config.importance_cap)  # min(w, C)
    return ImportanceWeights(truncated.to(terms.values.dtype), weight > config.importance_cap)
