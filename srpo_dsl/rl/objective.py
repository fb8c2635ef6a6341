"""The SRPO setwise objective (SRPO.md §2) as per-event terms, and the ratio pieces all losses share.

For member j of decision event e (a row of the batch), with generated-token mask m:

    l_ej   = sum_u m_eju * (log q_cur - log q_old)          sequence log-ratio of a member
    L_e    = c(K_e) * sum_j l_ej                            set log-ratio, c(K) = K^-1/2 | 1/K | 1
    rho_e  = exp(L_e)
    term_e = min(rho_e A_e, clip(rho_e, 1-eps, 1+eps) A_e)

J = 1/|B| * sum_e term_e is the event-mean of these terms (aggregation.py); the loss is -J.

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
    return SET_NORMS[set_norm](k)


def at_least_fp32(x: Tensor) -> Tensor:
    """bf16/fp16 -> fp32 (sums over long sequences); fp32 and fp64 unchanged."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


@dataclass(frozen=True)
class LossConfig:
    """The settings a policy loss reads; `set_norm` only changes losses with sets (srpo)."""

    clip_eps: float
    set_norm: str

    def __post_init__(self) -> None:
        check_set_norm(self.set_norm)
        if not self.clip_eps >= 0.0:
            raise ValueError(f"clip_eps must be >= 0, got {self.clip_eps}")


@dataclass(frozen=True)
class PolicyBatch:
    """One call's inputs: [B, T] log-probs (current, behaviour) and bool mask; [B] event ids, advantages."""

    logprobs: Tensor
    old_logprobs: Tensor
    mask: Tensor
    event_ids: Tensor
    advantages: Tensor

    @classmethod
    def of(
        cls,
        logprobs: Tensor,
        old_logprobs: Tensor,
        response_mask: Tensor,
        event_ids: Tensor,
        advantages: Tensor,
    ) -> PolicyBatch:
        """Check the shapes (ValueError) and make the mask bool."""
        if (
            logprobs.dim() != 2
            or old_logprobs.shape != logprobs.shape
            or response_mask.shape != logprobs.shape
        ):
            raise ValueError(
                f"logprobs, old_logprobs and response_mask must share one [B, T] shape, got "
                f"{tuple(logprobs.shape)}, {tuple(old_logprobs.shape)}, {tuple(response_mask.shape)}"
            )
        if event_ids.shape != logprobs.shape[:1] or advantages.shape != logprobs.shape[:1]:
            raise ValueError(
                f"event_ids and advantages must be [B]=[{logprobs.shape[0]}], got "
                f"{tuple(event_ids.shape)} and {tuple(advantages.shape)}"
            )
        return cls(logprobs, old_logprobs, response_mask.bool(), event_ids, advantages)


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

    def row_clips(self, num_rows: int) -> Tensor:
        """[B, 2] (clipped units, units) per row, to key the clip fraction by a row's role or event type.

        Token terms: the row's clipped tokens and tokens. Terms over sets or rows: a unit
        counts once, on its first row (a set's rows share its role and event type).
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
            rows = torch.arange(num_rows, device=unit.device)
            first = torch.full_like(clipped, unit.numel(), dtype=torch.long)
            first = first.scatter_reduce(0, unit, rows, "amin")
            is_first = first[unit] == rows
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
            metrics |= {"num_events": values[0], "mean_set_size": values[4]}
        return metrics


def token_log_ratio(batch: PolicyBatch) -> Tensor:
    """log q_cur - log q_old per token, [B, T], at least fp32, exactly 0 off the mask.

    Masking is a select (torch.where), not a product, so whatever sits in masked
    positions (-1e9, inf, nan) never reaches the value or the gradient.
    """
    log_ratio = at_least_fp32(batch.logprobs) - at_least_fp32(batch.old_logprobs.detach())
    return torch.where(batch.mask, log_ratio, 0.0)


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
    """The one value of each event from its rows' copies, [B] -> [E]; ValueError unless they agree."""
    low = row_values.new_full((num_events,), float("inf")).scatter_reduce(0, inverse, row_values, "amin")
    high = row_values.new_full((num_events,), float("-inf")).scatter_reduce(0, inverse, row_values, "amax")
    if not torch.equal(low, high):
        raise ValueError("advantages must be equal for all members of an event")
    return low


def setwise_terms(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """SRPO: one ratio and one clip per decision event, [E] terms (events in sorted id order)."""
    events, inverse = torch.unique(batch.event_ids, return_inverse=True)
    num_events = events.numel()
    l_row = token_log_ratio(batch).sum(-1)  # l_ej
    adv_e = event_values(batch.advantages.detach().to(l_row.dtype), inverse, num_events)  # A_e
    l_sum = l_row.new_zeros(num_events).index_add(0, inverse, l_row)  # sum_j l_ej
    k = torch.bincount(inverse, minlength=num_events).to(l_row.dtype)  # K_e
    log_ratio = torch.nan_to_num(set_reduction_scale(k, config.set_norm) * l_sum, nan=0.0)  # L_e, no nan
    every_event = torch.ones_like(k, dtype=torch.bool)
    return clipped_terms(log_ratio, adv_e, config.clip_eps, every_event, set_size=k, unit_of_row=inverse)
