"""The SRPO setwise objective (SRPO.md §2) and group-relative advantages.

For member j of decision event e (a row of the batch), with generated-token mask m:

    l_ej  = sum_u m_eju * (log q_cur - log q_old)          sequence log-ratio of a member
    L_e   = K_e^(-1/2) * sum_j l_ej                        set log-ratio (set_norm="sqrt")
    rho_e = exp(L_e)
    J     = 1/|B| * sum_e min(rho_e A_e, clip(rho_e, 1-eps, 1+eps) A_e)

The loss is -J; |B| is the global number of events of the optimizer step.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

SetNorm = Literal["sqrt", "mean", "none"]
SET_NORMS: tuple[str, ...] = ("sqrt", "mean", "none")
MAX_LOG_RATIO = 20.0  # |L_e| is clamped here before exp: rho_e in [e^-20, e^20]


def set_reduction_scale(k: Tensor, set_norm: str) -> Tensor:
    """The factor applied to the summed member log-ratios: K^-1/2 (sqrt), 1/K (mean), 1 (none)."""
    if set_norm == "sqrt":
        return k.rsqrt()
    if set_norm == "mean":
        return k.reciprocal()
    if set_norm == "none":
        return torch.ones_like(k)
    raise ValueError(f"set_norm must be one of {SET_NORMS}, got {set_norm!r}")


def sequence_log_ratio(logprobs: Tensor, old_logprobs: Tensor, response_mask: Tensor) -> Tensor:
    """l_i = sum_u m_iu (logprobs - old_logprobs) per row, [B, T] -> [B], in at least float32.

    Masking is a select (torch.where), not a product, so whatever sits in masked
    positions (-1e9, inf, nan) never reaches the value or the gradient.
    """
    log_ratio = at_least_fp32(logprobs) - at_least_fp32(old_logprobs.detach())
    return torch.where(response_mask.bool(), log_ratio, 0.0).sum(-1)


def at_least_fp32(x: Tensor) -> Tensor:
    """bf16/fp16 -> fp32 (sums over long sequences); fp32 and fp64 unchanged."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def setwise_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    response_mask: Tensor,
    event_ids: Tensor,
    advantages: Tensor,
    *,
    clip_eps: float = 0.2,
    set_norm: SetNorm = "sqrt",
    num_events: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Return (-J, metrics) of SRPO.md §2: one ratio and one clip per decision event.

    logprobs, old_logprobs: [B, T] log-probs of the generated tokens (current, behaviour).
    response_mask: [B, T] bool or 0/1, true on generated tokens only.
    event_ids: [B] ints, equal id = one event (any values, need not be contiguous).
    advantages: [B], the event advantage A_e repeated on every member (else ValueError).
    num_events: |B|, the global event count of the optimizer step (data parallel /
        micro-batches); default: the number of events in this call.
    """
    _check_shapes(logprobs, old_logprobs, response_mask, event_ids, advantages)
    events, inverse = torch.unique(event_ids, return_inverse=True)
    n_local = events.numel()
    if num_events is None:
        num_events = n_local
    if num_events < n_local:
        raise ValueError(f"num_events={num_events} is smaller than the {n_local} events in this call")

    l_row = sequence_log_ratio(logprobs, old_logprobs, response_mask)  # l_ej, [B]
    adv = advantages.detach().to(l_row.dtype)
    adv_e = l_row.new_full((n_local,), float("inf")).scatter_reduce(0, inverse, adv, "amin")
    adv_max = l_row.new_full((n_local,), float("-inf")).scatter_reduce(0, inverse, adv, "amax")
    if not torch.equal(adv_e, adv_max):
        raise ValueError("advantages must be equal for all members of an event")

    l_e = l_row.new_zeros(n_local).index_add(0, inverse, l_row)  # sum_j l_ej
    k_e = torch.bincount(inverse, minlength=n_local).to(l_row.dtype)  # K_e
    log_ratio = torch.nan_to_num(set_reduction_scale(k_e, set_norm) * l_e, nan=0.0)  # L_e (overflow-safe)
    rho = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    unclipped = rho * adv_e
    clipped = rho.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv_e
    objective = torch.minimum(unclipped, clipped).sum() / max(num_events, 1)  # J

    clip_fraction = ratio_mean = log_ratio_abs_max = 0.0
    if n_local:
        with torch.no_grad():  # one device sync for all metrics
            stats = torch.stack([(clipped < unclipped).float().mean(), rho.mean(), log_ratio.abs().max()])
        clip_fraction, ratio_mean, log_ratio_abs_max = stats.tolist()
    metrics = {
        "clip_fraction": clip_fraction,  # events whose clipped term is selected (zero gradient)
        "num_events": float(n_local),
        "mean_set_size": event_ids.numel() / max(n_local, 1),
        "ratio_mean": ratio_mean,
        "log_ratio_abs_max": log_ratio_abs_max,
    }
    return -objective, metrics


def group_advantages(returns: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """A_i = (R_i - mean_g) / (std_g + eps) within each group g (any int ids).

    std is the population standard deviation (unbiased=False), so a singleton group,
    or a group whose returns are all equal, gets advantage 0.
    """
    if returns.shape != group_ids.shape or returns.dim() != 1:
        raise ValueError(
            f"returns and group_ids must be [N], got {tuple(returns.shape)} and {tuple(group_ids.shape)}"
        )
    groups, inverse = torch.unique(group_ids, return_inverse=True)
    r = at_least_fp32(returns)
    zeros = r.new_zeros(groups.numel())
    count = torch.bincount(inverse, minlength=groups.numel()).to(r.dtype)
    mean = zeros.index_add(0, inverse, r) / count
    centred = r - mean[inverse]
    std = (zeros.index_add(0, inverse, centred.square()) / count).sqrt()
    return centred / (std[inverse] + eps)


def event_advantages(returns: Tensor, group_ids: Tensor, event_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """group_advantages with one sample per EVENT, repeated on its rows: [B] -> [B].

    Row-level inputs (each row carries its event's return and group); the group mean and
    std are taken over events, so a K=5 event does not weigh five times a singleton.
    """
    events, inverse = torch.unique(event_ids, return_inverse=True)
    rows = torch.arange(event_ids.numel(), device=event_ids.device)
    first = rows.new_full((events.numel(),), rows.numel()).scatter_reduce(
        0, inverse, rows, "amin"
    )  # a row per event
    return group_advantages(returns[first], group_ids[first], eps)[inverse]


def _check_shapes(
    logprobs: Tensor, old_logprobs: Tensor, mask: Tensor, event_ids: Tensor, adv: Tensor
) -> None:
    if logprobs.dim() != 2 or old_logprobs.shape != logprobs.shape or mask.shape != logprobs.shape:
        raise ValueError(
            f"logprobs, old_logprobs and response_mask must share one [B, T] shape, got "
            f"{tuple(logprobs.shape)}, {tuple(old_logprobs.shape)}, {tuple(mask.shape)}"
        )
    if event_ids.shape != logprobs.shape[:1] or adv.shape != logprobs.shape[:1]:
        raise ValueError(
            f"event_ids and advantages must be [B]=[{logprobs.shape[0]}], got "
            f"{tuple(event_ids.shape)} and {tuple(adv.shape)}"
        )
