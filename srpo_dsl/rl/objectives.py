"""SRPO and the paper's baselines behind one call signature, keyed by name.

    srpo   one ratio and one clip per event (setwise_loss), mean over events
    grpo   per-token ratio and clip, mean over all generated tokens of the step
    seq    per-member sequence ratio and clip, mean over members (= srpo with K_e = 1)
    drmas  the grpo loss; it differs in the advantage groups (prompt x role)

Every objective optionally adds a KL penalty to a frozen reference (k3 estimator) and an
entropy bonus, both token means over `num_tokens`, both off by default.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from torch import Tensor

from srpo_dsl.rl.objective import (
    MAX_LOG_RATIO,
    SetNorm,
    at_least_fp32,
    event_advantages,
    group_advantages,
    setwise_loss,
)

Metrics = dict[str, float]


# The common signature is the inner `objective` of `_objective` below: setwise_loss's inputs,
# the global token/row counts, and the optional regularisers.
Objective = Callable[..., tuple[Tensor, Metrics]]


def _objective(policy_term: Callable[..., tuple[Tensor, Metrics]]) -> Objective:
    """Give a policy-gradient term the common signature, plus the KL and entropy terms.

    num_events / num_tokens / num_rows are the GLOBAL counts of the optimizer step
    (data parallel, micro-batches); each defaults to the count in this call.
    """

    def objective(
        logprobs: Tensor,
        old_logprobs: Tensor,
        response_mask: Tensor,
        event_ids: Tensor,
        advantages: Tensor,
        *,
        clip_eps: float = 0.2,
        set_norm: SetNorm = "sqrt",
        num_events: int | None = None,
        num_tokens: int | None = None,
        num_rows: int | None = None,
        ref_logprobs: Tensor | None = None,
        kl_coef: float = 0.0,
        entropy: Tensor | None = None,
        entropy_coef: float = 0.0,
    ) -> tuple[Tensor, Metrics]:
        if kl_coef and ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        if entropy_coef and entropy is None:
            raise ValueError("entropy_coef > 0 needs entropy")
        mask = response_mask.bool()
        num_tokens = max(int(mask.sum()) if num_tokens is None else num_tokens, 1)
        loss, metrics = policy_term(
            logprobs,
            old_logprobs,
            mask,
            event_ids,
            advantages,
            clip_eps=clip_eps,
            set_norm=set_norm,
            num_events=num_events,
            num_tokens=num_tokens,
            num_rows=num_rows,
        )
        if ref_logprobs is not None:
            kl = k3_kl(logprobs, ref_logprobs, mask).sum() / num_tokens
            loss = loss + kl_coef * kl
            metrics["kl"] = kl.item()
        if entropy is not None:
            mean_entropy = torch.where(mask, at_least_fp32(entropy), 0.0).sum() / num_tokens
            loss = loss - entropy_coef * mean_entropy
            metrics["entropy"] = mean_entropy.item()
        return loss, metrics

    objective.__name__ = objective.__qualname__ = policy_term.__name__
    objective.__doc__ = policy_term.__doc__
    return objective


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Per-token KL(cur || ref) estimate exp(d) - d - 1 with d = ref - cur; 0 off the mask."""
    d = torch.where(mask, at_least_fp32(ref_logprobs.detach()) - at_least_fp32(logprobs), 0.0)
    d = d.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return d.exp() - d - 1.0


@_objective
def srpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    mask: Tensor,
    event_ids: Tensor,
    advantages: Tensor,
    *,
    clip_eps: float,
    set_norm: SetNorm,
    num_events: int | None,
    **_: object,
) -> tuple[Tensor, Metrics]:
    """SRPO: one ratio and one clip per event, mean over the events of the step."""
    return setwise_loss(
        logprobs,
        old_logprobs,
        mask,
        event_ids,
        advantages,
        clip_eps=clip_eps,
        set_norm=set_norm,
        num_events=num_events,
    )


@_objective
def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    mask: Tensor,
    event_ids: Tensor,
    advantages: Tensor,
    *,
    clip_eps: float,
    num_tokens: int,
    **_: object,
) -> tuple[Tensor, Metrics]:
    """GRPO: r_iu = exp(log q_cur - log q_old) per token, clipped per token, token mean."""
    log_ratio = torch.where(mask, at_least_fp32(logprobs) - at_least_fp32(old_logprobs.detach()), 0.0)
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    adv = advantages.detach().to(log_ratio.dtype)[:, None]
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv
    objective = torch.where(mask, torch.minimum(unclipped, clipped), 0.0).sum() / num_tokens
    with torch.no_grad():  # one device sync for all metrics
        n = mask.sum()
        stats = torch.stack(
            [
                n.float(),
                ((clipped < unclipped) & mask).sum() / n.clamp(min=1),
                torch.where(mask, ratio, 0.0).sum() / n.clamp(min=1),
                log_ratio.abs().amax() if log_ratio.numel() else ratio.new_zeros(()),
            ]
        )
    local_tokens, clip_fraction, ratio_mean, log_ratio_abs_max = stats.tolist()
    metrics = {
        "clip_fraction": clip_fraction,
        "num_tokens": local_tokens,
        "ratio_mean": ratio_mean,
        "log_ratio_abs_max": log_ratio_abs_max,
    }
    return -objective, metrics


@_objective
def seq_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    mask: Tensor,
    event_ids: Tensor,
    advantages: Tensor,
    *,
    clip_eps: float,
    num_rows: int | None,
    **_: object,
) -> tuple[Tensor, Metrics]:
    """Sequence-level: one ratio and one clip per member (row), mean over rows."""
    rows = torch.arange(logprobs.shape[0], device=logprobs.device)
    return setwise_loss(
        logprobs, old_logprobs, mask, rows, advantages, clip_eps=clip_eps, num_events=num_rows
    )


drmas_loss = grpo_loss  # Dr. MAS: the GRPO loss on agent-wise (prompt x role) advantages

OBJECTIVES: dict[str, Objective] = {
    "srpo": srpo_loss,
    "grpo": grpo_loss,
    "seq": seq_loss,
    "drmas": drmas_loss,
}


def get_objective(name: str) -> Objective:
    """The objective registered under `name`."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; known objectives: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def advantage_groups(
    prompt_ids: Sequence[Hashable], event_types: Sequence[Hashable], roles: Sequence[Hashable], objective: str
) -> Tensor:
    """Dense group index per row: (prompt, event_type) for srpo/grpo/seq, (prompt, role) for drmas."""
    get_objective(objective)
    second = roles if objective == "drmas" else event_types
    if not len(prompt_ids) == len(event_types) == len(roles):
        raise ValueError("prompt_ids, event_types and roles must have one entry per row")
    index: dict[tuple[Hashable, Hashable], int] = {}
    return torch.tensor(
        [index.setdefault(key, len(index)) for key in zip(prompt_ids, second)], dtype=torch.long
    )


def compute_advantages(
    returns: Tensor, group_ids: Tensor, event_ids: Tensor, objective: str, eps: float = 1e-6
) -> Tensor:
    """Row advantages for `objective`: srpo normalises over events (one sample per event),
    the others over rows (one sample per response)."""
    get_objective(objective)
    if objective == "srpo":
        return event_advantages(returns, group_ids, event_ids, eps)
    return group_advantages(returns, group_ids, eps)
