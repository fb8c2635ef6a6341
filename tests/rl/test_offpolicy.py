"""The decoupled objective for off-policy rows (docs/objective.md §8), against values computed by hand.

Every loss gets its terms multiplied by a truncated importance weight of its unit,
w = min(q_old / mu, C), detached: per event under c(K_e) (srpo), per token (grpo, drmas),
per row (seq, and a user's [B] terms).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from srpo_dsl.registries import OBJECTIVES
from srpo_dsl.registries import SET_NORMS as REGISTERED_NORMS
from srpo_dsl.rl import get_objective, setwise_loss
from srpo_dsl.rl.loop.update import pad_right
from srpo_dsl.rl.objective.losses import policy_loss
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.rl.objective.setwise import (
    LossConfig,
    PolicyBatch,
    PolicyTerms,
    behavior_of_rows,
    clipped_terms,
    importance_weights,
    setwise_terms,
    token_log_ratio,
)
from srpo_dsl.rl.transport.staleness import stale_rows
from srpo_dsl.runtime.episode import Episode, Event, Member

BUILTIN_OBJECTIVES = tuple(OBJECTIVES)  # the one list of names: the registries'
SET_NORMS = tuple(REGISTERED_NORMS)

PAD = 0.0
# Event 4 has K = 2 (rows 0 and 1), event 9 has K = 1 (row 2). T = 2; row 1 has one token.
#   log q_cur - log q_old per token: row 0 [0.1, 0.0], row 1 [0.05], row 2 [0.05, 0.0]
#       -> l = 0.1, 0.05, 0.05 per row
#   log q_old - log mu per token:    row 0 [0.4, 0.2], row 1 [-0.2], row 2 [-0.3, -0.1]
#       -> 0.6, -0.2, -0.4 per row
# Every ratio below lies in [0.8, 1.2]: no clipping, so d term / d rho = A.
LP = [[-1.0, -2.0], [-0.45, PAD], [-0.7, -0.2]]
OLD = [[-1.1, -2.0], [-0.5, PAD], [-0.75, -0.2]]
MU = [[-1.5, -2.2], [-0.3, PAD], [-0.45, -0.1]]
MASK = [[1, 1], [1, 0], [1, 1]]
EVENTS = [4, 4, 9]
ADV = [1.0, 1.0, -0.5]
L_ROW = [0.1, 0.05, 0.05]
LOG_W_ROW = [0.6, -0.2, -0.4]
LOG_W_TOKEN = [[0.4, 0.2], [-0.2, 0.0], [-0.3, -0.1]]
GARBAGE = (float("inf"), float("-inf"), float("nan"), -1e9)


def tensors(mu=MU, dtype=torch.float64):
    logprobs = torch.tensor(LP, dtype=dtype, requires_grad=True)
    old = torch.tensor(OLD, dtype=dtype)
    behavior = None if mu is None else torch.tensor(mu, dtype=dtype)
    return logprobs, old, torch.tensor(MASK), torch.tensor(EVENTS), torch.tensor(ADV, dtype=dtype), behavior


def run(name: str, mu=MU, **kwargs):
    """(loss, d loss / d logprobs, metrics) of objective `name` on the batch above."""
    logprobs, old, mask, events, adv, behavior = tensors(mu)
    loss, metrics = get_objective(name)(
        logprobs, old, mask, events, adv, behavior_logprobs=behavior, **kwargs
    )
    loss.backward()
    return loss.item(), logprobs.grad, metrics


def assert_grad(grad: torch.Tensor, expected: list[list[float]]) -> None:
    assert torch.allclose(grad, torch.tensor(expected, dtype=grad.dtype), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "set_norm, c2, cap",
    [("sqrt", 1 / math.sqrt(2), 2.0), ("mean", 0.5, 2.0), ("sqrt", 1 / math.sqrt(2), 1.25)],
)
def test_srpo_weighs_each_event_by_its_set_ratio_of_proximal_to_behavior(set_norm, c2, cap) -> None:
    # event 4 (K = 2): L = c(2) (0.1 + 0.05), rho = e^L; log w = c(2) (0.6 - 0.2)
    #   sqrt: rho = e^0.10607 = 1.11190, w = e^0.28284 = 1.32689 (cut to 1.25 when C = 1.25)
    #   mean: rho = e^0.075   = 1.07788, w = e^0.2     = 1.22140
    # event 9 (K = 1, c = 1): rho = e^0.05 = 1.05127, w = e^-0.4 = 0.67032 (below 1, never cut)
    rho4, w4 = math.exp(c2 * 0.15), min(math.exp(c2 * 0.4), cap)
    rho9, w9 = math.exp(0.05), math.exp(-0.4)
    j = (w4 * rho4 * 1.0 + w9 * rho9 * -0.5) / 2  # event-mean over |B| = 2
    loss, grad, metrics = run("srpo", set_norm=set_norm, importance_cap=cap)
    assert loss == pytest.approx(-j, abs=1e-12)
    # d(-J)/d lp_eju = -(1/|B|) w_e A_e rho_e c(K_e) on every generated token of the event, 0 elsewhere
    g4, g9 = -w4 * 1.0 * rho4 * c2 / 2, -w9 * -0.5 * rho9 / 2
    assert_grad(grad, [[g4, g4], [g4, 0.0], [g9, g9]])
    assert metrics["importance_weight_mean"] == pytest.approx((w4 + w9) / 2, abs=1e-12)
    assert metrics["importance_capped_fraction"] == (0.5 if cap == 1.25 else 0.0)
    assert metrics["clip_fraction"] == 0.0


def test_srpo_through_setwise_loss_takes_the_same_keywords() -> None:
    logprobs, old, mask, events, adv, behavior = tensors()
    loss, metrics = setwise_loss(
        logprobs, old, mask, events, adv, behavior_logprobs=behavior, importance_cap=1.25
    )
    # as above, sqrt with C = 1.25: w_4 = 1.25, w_9 = e^-0.4
    j = (1.25 * math.exp(0.15 / math.sqrt(2)) - math.exp(-0.4) * 0.5 * math.exp(0.05)) / 2
    assert loss.item() == pytest.approx(-j, abs=1e-12)
    assert metrics["importance_capped_fraction"] == 0.5


@pytest.mark.parametrize("set_norm, scale", [("sqrt", 0.5), ("mean", 0.25), ("none", 1.0)])
def test_the_weight_of_a_set_uses_its_c_of_k(set_norm: str, scale: float) -> None:
    # one event of K = 4 members, each one token with log q_old - log mu = 0.3 (sequence weight e^0.3):
    # sum 1.2; none: w = e^1.2 = 3.32 -> cut to C = 2 (the product of four sequence weights);
    # sqrt: w = e^0.6 = 1.822; mean: w = e^0.3 = 1.350. Ratio 1 (lp = old), A = 1: J = w.
    lp = torch.zeros(4, 1, dtype=torch.float64, requires_grad=True)
    mu = torch.full((4, 1), -0.3, dtype=torch.float64)
    ones = torch.ones(4, 1, dtype=torch.bool)
    loss, metrics = setwise_loss(
        lp,
        lp.detach(),
        ones,
        torch.zeros(4, dtype=torch.long),
        torch.ones(4),
        set_norm=set_norm,
        behavior_logprobs=mu,
    )
    assert loss.item() == pytest.approx(-min(math.exp(1.2 * scale), 2.0), abs=1e-12)
    assert metrics["importance_capped_fraction"] == (1.0 if set_norm == "none" else 0.0)


@pytest.mark.parametrize("name", ["grpo", "drmas"])
@pytest.mark.parametrize("cap", [2.0, 1.3])
def test_token_losses_weigh_each_token(name: str, cap: float) -> None:
    # per token: r = e^(lp - old), w = min(e^(old - mu), C), over the 5 generated tokens
    #   row 0: r = e^0.1, 1;  w = e^0.4 = 1.49182 (1.3 when C = 1.3), e^0.2 = 1.22140;  A = 1
    #   row 1: r = e^0.05;    w = e^-0.2 = 0.81873;                                    A = 1
    #   row 2: r = e^0.05, 1; w = e^-0.3 = 0.74082, e^-0.1 = 0.90484;                   A = -0.5
    w = [[min(math.exp(x), cap) for x in row] for row in LOG_W_TOKEN]
    r = [[math.exp(0.1), 1.0], [math.exp(0.05), 1.0], [math.exp(0.05), 1.0]]
    tokens = [(i, u) for i in range(3) for u in range(2) if MASK[i][u]]
    j = sum(w[i][u] * r[i][u] * ADV[i] for i, u in tokens) / 5  # token-mean over 5 tokens
    loss, grad, metrics = run(name, importance_cap=cap)
    assert loss == pytest.approx(-j, abs=1e-12)
    # d(-J)/d lp_iu = -w_iu r_iu A_i / 5 on generated tokens, 0 on the padding
    expected = [[-w[i][u] * r[i][u] * ADV[i] / 5 if MASK[i][u] else 0.0 for u in range(2)] for i in range(3)]
    assert_grad(grad, expected)
    assert metrics["importance_weight_mean"] == pytest.approx(sum(w[i][u] for i, u in tokens) / 5, abs=1e-12)
    assert metrics["importance_capped_fraction"] == (0.2 if cap == 1.3 else 0.0)


@pytest.mark.parametrize("set_norm", SET_NORMS)
@pytest.mark.parametrize("cap", [2.0, 1.5])
def test_seq_weighs_each_row_by_its_sequence_weight(set_norm: str, cap: float) -> None:
    # per row (K = 1, so c = 1 under every norm): rho_i = e^l_i = e^0.1, e^0.05, e^0.05;
    # w_i = min(e^(0.6, -0.2, -0.4), C) = 1.82212 (1.5 when C = 1.5), 0.81873, 0.67032
    rho = [math.exp(x) for x in L_ROW]
    w = [min(math.exp(x), cap) for x in LOG_W_ROW]
    j = sum(w[i] * rho[i] * ADV[i] for i in range(3)) / 3  # row-mean over 3 rows
    loss, grad, metrics = run("seq", set_norm=set_norm, importance_cap=cap)
    assert loss == pytest.approx(-j, abs=1e-12)
    g = [-w[i] * rho[i] * ADV[i] / 3 for i in range(3)]  # d(-J)/d lp_iu = -w_i rho_i A_i / 3
    assert_grad(grad, [[g[0], g[0]], [g[1], 0.0], [g[2], g[2]]])
    assert metrics["importance_capped_fraction"] == pytest.approx(1 / 3 if cap == 1.5 else 0.0)


def random_batch(dtype: torch.dtype, seed: int = 0):
    """Six rows in events of K = 1, 2, 3, ratios far enough from 1 that some units clip."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(6, 5, generator=g, dtype=torch.float64) * 3
    lp = old + torch.randn(6, 5, generator=g, dtype=torch.float64) * 0.3
    mask = torch.rand(6, 5, generator=g) < 0.7
    mask[:, 0] = True
    events = torch.tensor([0, 1, 1, 2, 2, 2])
    adv = torch.tensor([0.7, -1.2, -1.2, 1.5, 1.5, 1.5], dtype=torch.float64)
    ref = old + 0.1
    return lp.to(dtype), old.to(dtype), mask, events, adv, ref.to(dtype)


def evaluate(name, lp, old, mask, events, adv, ref, set_norm="sqrt", **kwargs):
    """(loss, gradient, metrics) of `name` on a fresh leaf copy of lp, with the KL term on."""
    logprobs = lp.clone().requires_grad_(True)
    loss, metrics, _ = get_objective(name).evaluate(
        logprobs,
        old,
        mask,
        events,
        adv,
        set_norm=set_norm,
        ref_logprobs=ref,
        kl_coef=0.1,
        episode_ids=events,  # each event its own episode (traj's episodes of several events: test_traj.py)
        **kwargs,
    )
    loss.backward()
    return loss, logprobs.grad, metrics


@pytest.mark.parametrize("name", BUILTIN_OBJECTIVES)
@pytest.mark.parametrize("set_norm", SET_NORMS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_behavior_equal_to_proximal_is_bit_identical_to_no_correction(name, set_norm, dtype) -> None:
    lp, old, mask, events, adv, ref = random_batch(dtype)
    loss, grad, metrics = evaluate(name, lp, old, mask, events, adv, ref, set_norm)
    assert metrics["clip_fraction"] > 0  # the identity is checked where clipping acts too
    loss_w, grad_w, metrics_w = evaluate(
        name, lp, old, mask, events, adv, ref, set_norm, behavior_logprobs=old.clone(), importance_cap=1.0
    )
    assert torch.equal(loss, loss_w)
    assert torch.equal(grad, grad_w)
    assert metrics_w["importance_weight_mean"] == 1.0
    assert metrics_w["importance_capped_fraction"] == 0.0  # w = 1 = C is not cut
    assert {k: v for k, v in metrics_w.items() if not k.startswith("importance_")} == metrics
    assert "importance_weight_mean" not in metrics


@pytest.mark.parametrize("name", BUILTIN_OBJECTIVES)
@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_in_masked_behavior_changes_nothing(name: str, garbage: float) -> None:
    lp, old, mask, events, adv, ref = random_batch(torch.float64)
    mu = old - 0.2 * torch.arange(6, dtype=torch.float64)[:, None]  # a stale policy, row by row
    loss, grad, metrics = evaluate(name, lp, old, mask, events, adv, ref, behavior_logprobs=mu)
    dirty = torch.where(mask, mu, garbage)
    loss_d, grad_d, metrics_d = evaluate(name, lp, old, mask, events, adv, ref, behavior_logprobs=dirty)
    assert torch.equal(loss, loss_d)
    assert torch.equal(grad, grad_d)
    assert metrics == metrics_d
    assert metrics["importance_weight_mean"] != 1.0


def test_the_weights_are_detached() -> None:
    logprobs, old, mask, events, adv, behavior = tensors()
    old.requires_grad_(True)
    behavior.requires_grad_(True)
    loss, _ = setwise_loss(logprobs, old, mask, events, adv, behavior_logprobs=behavior)
    loss.backward()
    assert old.grad is None and behavior.grad is None and logprobs.grad is not None


@pytest.mark.parametrize("name, unit", [("srpo", "num_events"), ("grpo", "num_tokens"), ("seq", "num_rows")])
def test_micro_batches_sum_to_the_full_corrected_batch(name: str, unit: str) -> None:
    lp, old, mask, events, adv, ref = random_batch(torch.float64)
    mu = old - 0.3
    counts = {"num_events": 3, "num_tokens": int(mask.sum()), "num_rows": 6}
    full, grad, _ = evaluate(name, lp, old, mask, events, adv, ref, behavior_logprobs=mu, **counts)
    parts = [torch.tensor([0, 3, 4, 5]), torch.tensor([1, 2])]  # whole events in each part
    total, grads = 0.0, torch.zeros_like(grad)
    for idx in parts:
        picked = (t[idx] for t in (lp, old, mask, events, adv, ref))
        loss, g, _ = evaluate(name, *picked, behavior_logprobs=mu[idx], **counts)
        total, grads[idx] = total + loss.item(), g
    assert total == pytest.approx(full.item(), abs=1e-12)
    assert torch.allclose(grads, grad, atol=1e-12, rtol=0)


def gspo_rows(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """A user's [B] terms without sets (GSPO's length-normalised sequence ratio)."""
    log_ratio = token_log_ratio(batch).sum(-1) / batch.mask.sum(-1)
    every_row = torch.ones_like(log_ratio, dtype=torch.bool)
    return clipped_terms(log_ratio, batch.advantages.to(log_ratio.dtype), config.clip_eps, every_row)


def test_user_row_terms_get_one_weight_per_row() -> None:
    # log s_i = l_i / |y_i| = 0.1/2, 0.05/1, 0.05/2; the weight is the row's: w_i = e^(0.6, -0.2, -0.4)
    mine = policy_loss("user-rows", gspo_rows, aggregation="row-mean", advantage="row")
    logprobs, old, mask, events, adv, behavior = tensors()
    loss, metrics = mine(logprobs, old, mask, events, adv, behavior_logprobs=behavior)
    s = [0.05, 0.05, 0.025]
    j = sum(math.exp(LOG_W_ROW[i]) * math.exp(s[i]) * ADV[i] for i in range(3)) / 3
    assert loss.item() == pytest.approx(-j, abs=1e-12)
    assert metrics["importance_weight_mean"] == pytest.approx(sum(math.exp(x) for x in LOG_W_ROW) / 3)


def test_user_set_terms_get_c_of_k_from_their_rows() -> None:
    # srpo's terms without set_size: K_e is counted from unit_of_row, so the loss is srpo's
    def sets(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
        return replace(setwise_terms(batch, config), set_size=None)

    mine = policy_loss("user-sets", sets, aggregation="event-mean", advantage="event")
    for set_norm in SET_NORMS:
        logprobs, old, mask, events, adv, behavior = tensors()
        loss, _ = mine(logprobs, old, mask, events, adv, set_norm=set_norm, behavior_logprobs=behavior)
        expected = run("srpo", set_norm=set_norm)[0]
        assert loss.item() == expected


def test_shape_and_cap_errors() -> None:
    logprobs, old, mask, events, adv, _ = tensors()
    with pytest.raises(ValueError, match=r"behavior_logprobs \(3, 3\)"):
        setwise_loss(logprobs, old, mask, events, adv, behavior_logprobs=torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"behavior_logprobs \(3,\)"):
        PolicyBatch.of(logprobs, old, mask, events, adv, behavior_logprobs=torch.zeros(3))
    for cap in (0.5, 0.0, float("nan")):
        with pytest.raises(ValueError, match="importance_cap must be >= 1"):
            setwise_loss(logprobs, old, mask, events, adv, behavior_logprobs=old, importance_cap=cap)
    assert LossConfig(0.2, "sqrt", importance_cap=float("inf")).importance_cap == math.inf


def test_terms_of_no_known_unit_are_a_value_error() -> None:
    logprobs, old, mask, events, adv, behavior = tensors()
    batch = PolicyBatch.of(logprobs, old, mask, events, adv, behavior_logprobs=behavior)
    config = LossConfig(0.2, "sqrt")
    rows = gspo_rows(batch, config)
    four = clipped_terms(torch.zeros(4), torch.ones(4), 0.2, torch.ones(4, dtype=torch.bool))
    scalar = clipped_terms(torch.zeros(()), torch.ones(()), 0.2, torch.ones((), dtype=torch.bool))
    for terms in (four, scalar, replace(rows, unit_of_row=torch.zeros(2, dtype=torch.long))):
        with pytest.raises(ValueError, match="importance weights need"):
            importance_weights(batch, terms, config)
    assert importance_weights(replace(batch, behavior_logprobs=None), rows, config) is None


def test_an_episode_mixing_versions_weighs_each_member_by_its_own_behavior_policy() -> None:
    """One episode generated across weight updates (a worker takes each new version before its next call),
    trained at proximal version 5. Event A (K = 2) mixes member a1 of version 4 and a2 of version 5 (a
    retry drawn after the update); event B (K = 1) is b1 of version 3. A fresh member's mu is the proximal
    policy (log-weight exactly 0, whatever its recorded log-probs say); a stale one's, its own record.

        recorded mu        a1 [-1.0, -0.5]   a2 [-0.7]   b1 [-0.2]
        proximal q_prox    a1 [-0.8, -0.4]   a2 [-0.9]   b1 [-0.5]
        log w_A = c(2) * ((0.2 + 0.1) + 0) = 0.3 / sqrt 2 = 0.212132,  w_A = 1.236311
        log w_B = c(1) * (-0.3)                         = -0.3,          w_B = 0.740818
    (a2 corrected against its own record would give c(2) * 0.1: w_A = 1.073271)."""

    def member(i: int, version: int, response: list[int], mu: list[float]) -> Member:
        return Member(i, "solver", i, "lm", version, [1, 2], response, mu, "x", True)

    ep = Episode("p/0", "p", 0, {"id": "p"})
    ep.events = [
        Event(
            "A", "solver", "n", "s", 2, True, [member(0, 4, [3, 4], [-1.0, -0.5]), member(1, 5, [5], [-0.7])]
        ),
        Event("B", "solver", "n", "s", 1, True, [member(0, 3, [6], [-0.2])]),
    ]
    rows = build_rows([ep], "srpo")
    assert rows.versions == [4, 5, 3]
    stale = stale_rows(rows.versions, rows.policies, current=5, trained={"lm"})
    assert stale.tolist() == [True, False, True]
    proximal = torch.tensor([[-0.8, -0.4], [-0.9, PAD], [-0.5, PAD]], dtype=torch.float64)
    recorded = pad_right(rows.behavior_logprobs, 2).double()
    mask = torch.tensor([[1, 1], [1, 0], [1, 0]])
    behavior = behavior_of_rows(stale, recorded, proximal)
    assert torch.equal(behavior[1], proximal[1])  # the fresh member: its proximal log-probs
    batch = PolicyBatch.of(
        proximal.clone(), proximal, mask, rows.event_ids, rows.advantages.double(), behavior
    )
    config = LossConfig(clip_eps=0.2, set_norm="sqrt", importance_cap=2.0)
    weights = importance_weights(batch, setwise_terms(batch, config), config)
    assert weights is not None
    expected = [math.exp(0.3 / math.sqrt(2)), math.exp(-0.3)]
    assert weights.values.tolist() == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx([1.236311, 0.740818], abs=1e-6) and not weights.capped.any()
