"""What the objective tests share: a random batch of scored rows (`random_batch`) and SRPO's setwise terms
written as a user's objective plugin (`SRPO_AGAIN`)."""

from __future__ import annotations

import torch


def random_batch(seed: int, rows: int = 40, tokens: int = 12):
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(1, 5, (rows,), generator=g)
    events = torch.repeat_interleave(torch.arange(rows), k)[:rows] * 5 + 3  # non-contiguous ids
    events = events[torch.randperm(rows, generator=g)]  # an event's rows need not be adjacent
    lengths = torch.randint(1, tokens + 1, (rows,), generator=g)
    mask = torch.arange(tokens)[None, :] < lengths[:, None]
    old = -torch.rand(rows, tokens, generator=g, dtype=torch.float64) * 3
    lp = (old + 0.15 * torch.randn(rows, tokens, generator=g, dtype=torch.float64)).masked_fill(~mask, -1e9)
    adv_per_id = torch.randn(int(events.max()) + 1, generator=g, dtype=torch.float64)
    return lp.requires_grad_(), old.masked_fill(~mask, -1e9), mask, events, adv_per_id[events]


SRPO_AGAIN = '''
"""SRPO's setwise terms, re-implemented against the plugin API only."""
import torch

from srpo_dsl.rl.objective.setwise import LossConfig, PolicyBatch, PolicyTerms, clipped_terms, token_log_ratio

C = {"sqrt": lambda k: k**-0.5, "mean": lambda k: 1.0 / k, "none": torch.ones_like}


def loss(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    events, event_of_row = torch.unique(batch.event_ids, return_inverse=True)
    member = token_log_ratio(batch).sum(-1)  # l_ej
    zeros = member.new_zeros(len(events))
    k = zeros.index_add(0, event_of_row, torch.ones_like(member))  # K_e
    summed = zeros.index_add(0, event_of_row, member)  # sum_j l_ej
    advantage = zeros.index_copy(0, event_of_row, batch.advantages.detach().to(member.dtype))  # A_e
    every_event = torch.ones_like(k, dtype=torch.bool)
    return clipped_terms(C[config.set_norm](k) * summed, advantage, config.clip_eps, every_event, k, event_of_row)
'''
