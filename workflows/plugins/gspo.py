"""GSPO's loss (Zheng et al., 2025, "Group Sequence Policy Optimization"), written only against the
plugin API of docs/objective.md: one importance ratio per response, the geometric mean of its token
ratios, clipped per response.

    log s_i = 1/|y_i| * sum_t (log pi(y_it) - log pi_old(y_it))
    term_i  = min(s_i A_i, clip(s_i, 1 - eps, 1 + eps) A_i)
    J       = 1/|R| * sum_i term_i                               (aggregation = "row-mean")

A_i are GRPO's group-normalised returns (`advantage = row`). GSPO clips a length-normalised ratio,
so its clip range is small (the paper: 3e-4 below, 4e-4 above; `clip` here is one symmetric eps).
A workflow names it: `train with (objective = "plugins/gspo.py:loss", aggregation = "row-mean")`.
"""

import torch

from srpo_dsl.rl.objective.setwise import LossConfig, PolicyBatch, PolicyTerms, clipped_terms, token_log_ratio


def loss(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """One clipped term per row (response): [B] terms, every row a valid unit."""
    lengths = batch.mask.sum(-1).clamp(min=1)  # |y_i|
    log_ratio = token_log_ratio(batch).sum(-1) / lengths  # log s_i
    advantages = batch.advantages.detach().to(log_ratio.dtype)  # A_i
    every_row = torch.ones_like(advantages, dtype=torch.bool)
    return clipped_terms(log_ratio, advantages, config.clip_eps, every_row)
