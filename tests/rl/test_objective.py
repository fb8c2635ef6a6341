"""The SRPO objective (docs/objective.md §1) and its baselines, against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from srpo_dsl.registries import SET_NORMS as REGISTERED_NORMS
from srpo_dsl.rl import (
    ADVANTAGE_ESTIMATORS,
    OBJECTIVES,
    aggregate,
    get_advantage_estimator,
    get_objective,
    group_advantages,
    register_advantage_estimator,
    register_policy_loss,
    setwise_loss,
)
from srpo_dsl.rl.objective.advantages import AdvantageInputs, event_advantages, group_index
from srpo_dsl.rl.objective.setwise import set_reduction_scale
from tests.support.objective import random_batch

BUILTIN_OBJECTIVES = tuple(OBJECTIVES)  # the one list of names: the registries'
SET_NORMS = tuple(REGISTERED_NORMS)

PAD = 0.0
# Two events. Event 7 (K=1): one member, l = (-1.0+1.1) + (-0.5+0.6) = 0.2, A = +1.
# Event 3 (K=3): members l = 0.05, 0.1, -0.03 (sum 0.12), A = -0.5.
LP = [[-1.0, -0.5, PAD], [-0.3, -0.7, -0.2], [-2.0, PAD, PAD], [-0.4, -0.6, PAD]]
OLD = [[-1.1, -0.6, PAD], [-0.35, -0.7, -0.2], [-2.1, PAD, PAD], [-0.41, -0.56, PAD]]
MASK = [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]]
EVENTS = [7, 3, 3, 3]
ADV = [1.0, -0.5, -0.5, -0.5]


def batch(lp=LP, old=OLD, mask=MASK, events=EVENTS, adv=ADV, dtype=torch.float64):
    logprobs = torch.tensor(lp, dtype=dtype, requires_grad=True)
    old_logprobs, advantages = torch.tensor(old, dtype=dtype), torch.tensor(adv, dtype=dtype)
    return logprobs, old_logprobs, torch.tensor(mask), torch.tensor(events), advantages


def clipped_min(rho: float, adv: float, eps: float = 0.2) -> float:
    return min(rho * adv, min(max(rho, 1 - eps), 1 + eps) * adv)


@pytest.mark.parametrize("set_norm, scale", [("sqrt", 1 / math.sqrt(3)), ("mean", 1 / 3), ("none", 1.0)])
def test_hand_values(set_norm: str, scale: float) -> None:
    # event 7: rho = e^0.2 = 1.2214 > 1.2 with A > 0 -> clipped to 1.2
    # event 3: rho = e^(0.12 * scale), inside [0.8, 1.2] -> unclipped, times -0.5
    j = (1.2 * 1.0 + math.exp(0.12 * scale) * -0.5) / 2
    loss, metrics = setwise_loss(*batch(), set_norm=set_norm)
    assert loss.item() == pytest.approx(-j, abs=1e-12)
    assert metrics["num_events"] == 2
    assert metrics["mean_set_size"] == 2.0
    assert metrics["clip_fraction"] == 0.5
    assert metrics["ratio_mean"] == pytest.approx((math.exp(0.2) + math.exp(0.12 * scale)) / 2)
    assert metrics["log_ratio_abs_max"] == pytest.approx(0.2)


def test_norms_differ_for_k_above_one() -> None:
    losses = {n: setwise_loss(*batch(), set_norm=n)[0].item() for n in ("sqrt", "mean", "none")}
    # event 3 has A < 0, so a larger set log-ratio gives a smaller J: none > sqrt > mean in loss
    assert losses["none"] > losses["sqrt"] > losses["mean"]


def test_k1_all_norms_equal_sequence_ratio() -> None:
    lp, old, mask = LP[:3], OLD[:3], MASK[:3]
    events, adv = [0, 1, 2], [1.0, -0.5, 2.0]
    # l = 0.2, 0.05, 0.1 -> rho = e^l; rows 0 and 2 (A > 0) clip at 1.2 when rho > 1.2
    j = sum(clipped_min(math.exp(lr), a) for lr, a in zip([0.2, 0.05, 0.1], adv)) / 3
    for set_norm in ("sqrt", "mean", "none"):
        loss, _ = setwise_loss(*batch(lp, old, mask, events, adv), set_norm=set_norm)
        assert loss.item() == pytest.approx(-j, abs=1e-12)


def test_set_reduction_scale() -> None:
    k = torch.tensor([1.0, 4.0])
    assert set_reduction_scale(k, "sqrt").tolist() == [1.0, 0.5]
    assert set_reduction_scale(k, "mean").tolist() == [1.0, 0.25]
    assert set_reduction_scale(k, "none").tolist() == [1.0, 1.0]


def test_clipped_event_has_exactly_zero_gradient() -> None:
    lp, *rest = batch()
    setwise_loss(lp, *rest)[0].backward()
    assert torch.all(lp.grad[0] == 0)  # event 7 is clipped
    mask = torch.tensor(MASK, dtype=torch.bool)
    assert torch.all(lp.grad[1:][mask[1:]] != 0)
    assert torch.all(lp.grad[~mask] == 0)


def test_unequal_advantages_in_an_event_raise() -> None:
    with pytest.raises(ValueError, match="equal"):
        setwise_loss(*batch(adv=[1.0, -0.5, -0.5, -0.4]))


def test_bad_set_norm_raises() -> None:
    with pytest.raises(ValueError, match="set_norm"):
        setwise_loss(*batch(), set_norm="sum")


def test_bad_shapes_and_num_events_raise() -> None:
    lp, old, mask, events, adv = batch()
    with pytest.raises(ValueError):
        setwise_loss(lp, old[:, :2], mask, events, adv)
    with pytest.raises(ValueError):
        setwise_loss(lp, old, mask, events[:3], adv)
    with pytest.raises(ValueError, match="num_events"):
        setwise_loss(lp, old, mask, events, adv, num_events=1)


@pytest.mark.parametrize("garbage", [-1e9, 1e30, -3e38, float("inf"), float("-inf"), float("nan")])
def test_masked_padding_never_leaks(garbage: float) -> None:
    clean_lp, *rest = batch(dtype=torch.float32)
    loss_clean, _ = setwise_loss(clean_lp, *rest)
    loss_clean.backward()
    mask = torch.tensor(MASK, dtype=torch.bool)
    lp_dirty = torch.tensor(LP).masked_fill(~mask, garbage).requires_grad_()
    old_dirty = torch.tensor(OLD).masked_fill(~mask, -garbage)
    loss, metrics = setwise_loss(lp_dirty, old_dirty, mask, *rest[2:])
    loss.backward()
    assert torch.isfinite(loss) and loss.item() == loss_clean.item()
    assert torch.equal(lp_dirty.grad, clean_lp.grad)
    assert all(math.isfinite(v) for v in metrics.values())


def test_extreme_unmasked_values_are_finite() -> None:
    lp = torch.tensor([[3e38, 3e38], [-3e38, 3e38], [50.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-3e38, -3e38], [3e38, -3e38], [0.0, 0.0]])
    loss, metrics = setwise_loss(
        lp, old, torch.ones(3, 2), torch.tensor([0, 1, 2]), torch.tensor([1.0, -1.0, 1.0])
    )
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())


def test_num_events_scales_the_loss() -> None:
    loss_local, _ = setwise_loss(*batch())
    loss_global, _ = setwise_loss(*batch(), num_events=8)
    assert loss_global.item() == pytest.approx(loss_local.item() * 2 / 8, abs=1e-12)


def test_gradient_equals_detached_per_member_weights() -> None:
    # docs/objective.md §3: dJ = 1/|B| sum_e g_e K_e^-1/2 sum_j dl_ej, g_e = rho_e A_e if unclipped else 0
    lp, old, mask, events, adv = random_batch(0)
    loss, metrics = setwise_loss(lp, old, mask, events, adv)
    assert 0 < metrics["clip_fraction"] < 1
    (grad,) = torch.autograd.grad(loss, lp)

    l_row = torch.where(mask, lp - old, 0.0).sum(-1)
    with torch.no_grad():
        _, inv = torch.unique(events, return_inverse=True)
        k = torch.bincount(inv).double()
        set_log_ratio = torch.zeros_like(k).index_add(0, inv, l_row) / k.sqrt()
        rho = set_log_ratio.exp()
        a = torch.zeros_like(k).index_add(0, inv, adv) / k
        unclipped_active = rho * a <= rho.clamp(0.8, 1.2) * a
        weight = torch.where(unclipped_active, rho * a, 0.0) / k.sqrt() / k.numel()
    surrogate = -(weight[inv] * l_row).sum()
    (expected,) = torch.autograd.grad(surrogate, lp, retain_graph=True)
    torch.testing.assert_close(grad, expected, atol=1e-6, rtol=0)
    # mixed-policy events: back-propagating each row separately with its detached weight
    per_row = sum(
        torch.autograd.grad(-(weight[inv][i] * l_row[i]), lp, retain_graph=True)[0] for i in range(len(inv))
    )
    torch.testing.assert_close(grad, per_row, atol=1e-6, rtol=0)


def test_micro_batches_sum_to_the_full_batch() -> None:
    lp, old, mask, events, adv = random_batch(1)
    n = int(torch.unique(events).numel())
    full, _ = setwise_loss(lp, old, mask, events, adv)
    (full_grad,) = torch.autograd.grad(full, lp)
    first = torch.isin(events, torch.unique(events)[: n // 2])  # whole events in each half
    total = torch.zeros((), dtype=torch.float64)
    grad = torch.zeros_like(lp)
    for part in (first, ~first):
        loss, _ = setwise_loss(lp[part], old[part], mask[part], events[part], adv[part], num_events=n)
        total = total + loss.detach()
        grad += torch.autograd.grad(loss, lp)[0]
    assert total.item() == pytest.approx(full.item(), abs=1e-12)
    torch.testing.assert_close(grad, full_grad, atol=1e-12, rtol=0)


def test_float32_and_bf16_inputs() -> None:
    lp, old, mask, events, adv = batch(dtype=torch.float32)
    loss32, _ = setwise_loss(lp, old, mask, events, adv)
    loss64, _ = setwise_loss(*batch())
    assert loss32.dtype == torch.float32 and loss32.item() == pytest.approx(loss64.item(), abs=1e-6)
    lp16 = lp.detach().bfloat16().requires_grad_()
    loss16, _ = setwise_loss(lp16, old.bfloat16(), mask, events, adv.bfloat16())
    loss16.backward()
    assert loss16.dtype == torch.float32 and lp16.grad.dtype == torch.bfloat16


def test_empty_batch_is_zero() -> None:
    lp = torch.zeros(0, 3, requires_grad=True)
    loss, metrics = setwise_loss(
        lp,
        torch.zeros(0, 3),
        torch.zeros(0, 3),
        torch.zeros(0, dtype=torch.long),
        torch.zeros(0),
        num_events=4,
    )
    loss.backward()
    assert loss.item() == 0.0 and metrics["num_events"] == 0


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    rows=st.integers(1, 6),
    tokens=st.integers(1, 5),
    set_norm=st.sampled_from(["sqrt", "mean", "none"]),
)
def test_loss_is_finite_for_finite_inputs(data: st.DataObject, rows: int, tokens: int, set_norm: str) -> None:
    floats = st.floats(allow_nan=False, allow_infinity=False, width=32)
    lp = torch.tensor(data.draw(st.lists(floats, min_size=rows * tokens, max_size=rows * tokens))).view(
        rows, tokens
    )
    old = torch.tensor(data.draw(st.lists(floats, min_size=rows * tokens, max_size=rows * tokens))).view(
        rows, tokens
    )
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=rows * tokens, max_size=rows * tokens)))
    events = torch.tensor(data.draw(st.lists(st.integers(0, 3), min_size=rows, max_size=rows)))
    adv_per_id = torch.tensor(data.draw(st.lists(st.floats(-1e6, 1e6, width=32), min_size=4, max_size=4)))
    lp.requires_grad_()
    loss, metrics = setwise_loss(
        lp, old, mask.view(rows, tokens), events, adv_per_id[events], set_norm=set_norm
    )
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())


# --- baselines --------------------------------------------------------------------------

# Row 0: token log-ratios 0.5, 0.0, A = +1. Row 1: token log-ratio -0.3, A = -2. One event id
# for both rows with unequal advantages: fine for the per-token and per-row baselines.
B_LP, B_OLD, B_MASK = [[-1.0, -2.0], [-0.4, PAD]], [[-1.5, -2.0], [-0.1, PAD]], [[1, 1], [1, 0]]
B_EVENTS, B_ADV = [0, 0], [1.0, -2.0]


def test_grpo_token_mean() -> None:
    # tokens: min(e^.5, 1.2) * 1 = 1.2 ; 1 * 1 = 1 ; min(e^-.3 * -2, 0.8 * -2) = -1.6 (clipped)
    j = (1.2 + 1.0 - 1.6) / 3
    loss, metrics = get_objective("grpo")(*batch(B_LP, B_OLD, B_MASK, B_EVENTS, B_ADV))
    assert loss.item() == pytest.approx(-j, abs=1e-12)
    assert metrics["clip_fraction"] == pytest.approx(2 / 3)
    loss_global, _ = get_objective("grpo")(*batch(B_LP, B_OLD, B_MASK, B_EVENTS, B_ADV), num_tokens=6)
    assert loss_global.item() == pytest.approx(-j / 2, abs=1e-12)
    loss_drmas, _ = get_objective("drmas")(*batch(B_LP, B_OLD, B_MASK, B_EVENTS, B_ADV))
    assert loss_drmas.item() == loss.item()


def test_seq_per_row_clip() -> None:
    # row 0: rho = e^0.5 -> clipped 1.2 * 1 ; row 1: rho = e^-0.3 -> clipped 0.8 * -2
    j = (1.2 - 1.6) / 2
    loss, metrics = get_objective("seq")(*batch(B_LP, B_OLD, B_MASK, B_EVENTS, B_ADV))
    assert loss.item() == pytest.approx(-j, abs=1e-12)
    assert metrics["clip_fraction"] == 1.0
    loss_global, _ = get_objective("seq")(*batch(B_LP, B_OLD, B_MASK, B_EVENTS, B_ADV), num_rows=4)
    assert loss_global.item() == pytest.approx(-j / 2, abs=1e-12)


def test_srpo_entry_matches_setwise_loss() -> None:
    for set_norm in ("sqrt", "mean", "none"):
        loss, _ = OBJECTIVES["srpo"](*batch(), set_norm=set_norm, num_events=5)
        assert loss.item() == setwise_loss(*batch(), set_norm=set_norm, num_events=5)[0].item()


def test_kl_term() -> None:
    ref = [[-1.2, -0.5], [-0.4, PAD]]  # d = ref - cur = -0.2, 1.5, 0.0 on the 3 tokens
    kl = sum(math.exp(d) - d - 1 for d in (-0.2, 1.5, 0.0)) / 3
    base, _ = get_objective("grpo")(*batch(B_LP, B_OLD, B_MASK, B_EVENTS, B_ADV))
    loss, metrics = get_objective("grpo")(
        *batch(B_LP, B_OLD, B_MASK, B_EVENTS, B_ADV),
        ref_logprobs=torch.tensor(ref, dtype=torch.float64),
        kl_coef=0.5,
    )
    assert metrics["kl"] == pytest.approx(kl)
    assert loss.item() == pytest.approx(base.item() + 0.5 * kl, abs=1e-12)
    with pytest.raises(ValueError, match="ref_logprobs"):
        get_objective("srpo")(*batch(), kl_coef=0.1)


def test_unknown_objective_lists_names() -> None:
    with pytest.raises(ValueError, match="srpo, grpo, seq, drmas"):
        get_objective("ppo")


def test_all_objectives_share_one_signature() -> None:
    for name, objective in OBJECTIVES.items():
        loss, metrics = objective(
            *batch(),
            clip_eps=0.1,
            set_norm="mean",
            num_events=3,
            num_tokens=20,
            num_rows=9,
            episode_ids=torch.tensor(EVENTS),  # each event its own episode
            num_episodes=3,
        )
        assert loss.dim() == 0 and "clip_fraction" in metrics, name


# --- the registry and the aggregation -------------------------------------------------------


def test_the_builtin_objectives_and_what_they_train_on() -> None:
    assert tuple(OBJECTIVES)[:5] == BUILTIN_OBJECTIVES
    assert {n: (get_objective(n).aggregation, get_objective(n).advantage) for n in BUILTIN_OBJECTIVES} == {
        "srpo": ("event-mean", "event"),
        "grpo": ("token-mean", "row"),
        "seq": ("row-mean", "row"),
        "drmas": ("token-mean", "agent"),
        "traj": ("episode-mean", "episode"),
    }
    assert all(get_objective(n).name == n for n in BUILTIN_OBJECTIVES)
    assert all(
        get_objective(n).estimator is ADVANTAGE_ESTIMATORS[get_objective(n).advantage] for n in OBJECTIVES
    )


def test_registering_twice_or_with_unknown_names_fails() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register_policy_loss("grpo", aggregation="token-mean", advantage="row")(lambda b, c: None)
    with pytest.raises(ValueError, match="known: event-mean, token-mean, row-mean, episode-mean"):
        register_policy_loss("new", aggregation="sum", advantage="row")
    with pytest.raises(ValueError, match="unknown advantage estimator 'gae'"):
        register_policy_loss("new", aggregation="row-mean", advantage="gae")
    assert "new" not in OBJECTIVES


@pytest.mark.parametrize("name", BUILTIN_OBJECTIVES)
def test_a_mistyped_keyword_or_set_norm_is_an_error(name: str) -> None:
    with pytest.raises(TypeError, match="num_event"):
        get_objective(name)(*batch(), num_event=3)
    with pytest.raises(ValueError, match="set_norm"):
        get_objective(name)(*batch(), set_norm="sum")


@pytest.mark.parametrize("name", ["grpo", "seq", "drmas"])
def test_set_norm_changes_only_srpo(name: str) -> None:
    losses = {get_objective(name)(*batch(), set_norm=n)[0].item() for n in SET_NORMS}
    assert len(losses) == 1


def test_aggregate_divides_the_sum_by_the_global_count() -> None:
    assert aggregate(torch.tensor([1.0, 2.0, 3.0]), "event-mean", 4).item() == 1.5
    assert aggregate(torch.tensor([[1.0, 0.0], [2.0, 3.0]]), "token-mean", 3).item() == 2.0
    assert aggregate(torch.tensor([1.0, 2.0]), "row-mean", 0).item() == 3.0  # an empty step: N = 1
    with pytest.raises(ValueError, match="2-d terms"):
        aggregate(torch.ones(3), "token-mean", 3)
    with pytest.raises(ValueError, match="known: event-mean"):
        aggregate(torch.ones(3), "sum", 3)


# batch(): 2 events, 8 generated tokens, 4 rows
@pytest.mark.parametrize(
    "name, unit, local",
    [
        ("srpo", "num_events", 2),
        ("grpo", "num_tokens", 8),
        ("seq", "num_rows", 4),
        ("drmas", "num_tokens", 8),
    ],
)
def test_metrics_count_the_units_and_a_smaller_global_count_fails(name: str, unit: str, local: int) -> None:
    _, metrics = get_objective(name)(*batch())
    assert metrics[unit] == metrics["num_units"] == local
    assert metrics.get("num_events", metrics.get("num_tokens")) == local  # the trainer's clip weight
    with pytest.raises(ValueError, match=f"{unit}={local - 1} is smaller"):
        get_objective(name)(*batch(), **{unit: local - 1})


@pytest.mark.parametrize("name", BUILTIN_OBJECTIVES)
def test_every_objective_splits_into_micro_batches_exactly(name: str) -> None:
    lp, old, mask, events, adv = random_batch(2)
    ref = old + 0.1 * torch.randn(old.shape, generator=torch.Generator().manual_seed(3), dtype=old.dtype)
    counts = {
        "num_events": int(torch.unique(events).numel()),
        "num_tokens": int(mask.sum()),
        "num_rows": len(events),
        "num_episodes": int(torch.unique(events).numel()),  # each event its own episode
    }
    objective = get_objective(name)
    full, _ = objective(lp, old, mask, events, adv, ref_logprobs=ref, kl_coef=0.3, episode_ids=events)
    (full_grad,) = torch.autograd.grad(full, lp)
    first = torch.isin(events, torch.unique(events)[::2])  # whole events in each part
    total, grad = torch.zeros((), dtype=torch.float64), torch.zeros_like(lp)
    for part in (first, ~first):
        loss, _ = objective(
            lp[part],
            old[part],
            mask[part],
            events[part],
            adv[part],
            ref_logprobs=ref[part],
            kl_coef=0.3,
            episode_ids=events[part],
            **counts,
        )
        total = total + loss.detach()
        grad += torch.autograd.grad(loss, lp)[0]
    assert total.item() == pytest.approx(full.item(), abs=1e-12)
    torch.testing.assert_close(grad, full_grad, atol=1e-12, rtol=0)


# --- advantages ---------------------------------------------------------------------------


def test_group_advantages_hand_values() -> None:
    returns = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0, 2.0, 2.0])
    groups = torch.tensor([4, 4, 4, 4, 9, 2, 2])
    # group 4: mean 0.5, population std 0.5 ; group 9: singleton -> 0 ; group 2: all equal -> 0
    a = 0.5 / (0.5 + 1e-6)
    expected = torch.tensor([a, -a, -a, a, 0.0, 0.0, 0.0])
    torch.testing.assert_close(group_advantages(returns, groups), expected)


def test_event_advantages_count_each_event_once() -> None:
    # one group: a K=3 event with return 1 and a K=1 event with return 0 -> +1 / -1 per event
    returns, groups, events = torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.zeros(4), torch.tensor([5, 5, 5, 8])
    per_event = torch.tensor([1.0, 1.0, 1.0, -1.0])
    torch.testing.assert_close(event_advantages(returns, groups, events, eps=0.0), per_event)
    inputs = AdvantageInputs(returns, events, ["p"] * 4, ["solve"] * 4, ["a"] * 4)
    torch.testing.assert_close(get_objective("srpo").advantages(inputs, eps=0.0), per_event)
    rows = get_objective("grpo").advantages(inputs, eps=0.0)  # rows: mean 0.75, std sqrt(3)/4
    torch.testing.assert_close(rows, (returns - 0.75) / (math.sqrt(3) / 4))


def test_group_index_is_dense_in_order_of_first_appearance() -> None:
    assert group_index(["p", "p", "q", "p"], ["x", "y", "x", "x"]).tolist() == [0, 1, 2, 0]
    assert group_index([], []).tolist() == []


# Rows: event 0 = rows 0, 1 (K=2, roles a, b), R=1; events 1..4 are singletons.
# (prompt, type) groups: {ev 0 R=1, ev 1 R=0}, {ev 2 R=1, ev 3 R=0}, {ev 4}; (prompt, role): {0,2,3,4}, {1}, {5}.
EST_RETURNS = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
EST_EVENTS = [0, 0, 1, 2, 3, 4]
EST_PROMPTS, EST_ROLES = ["p", "p", "p", "p", "p", "q"], ["a", "b", "a", "a", "a", "a"]
EST_TYPES = ["solve", "solve", "solve", "verify", "verify", "solve"]
A = 0.5 / (0.5 + 1e-6)  # returns {1, 0}: mean 0.5, population std 0.5
R2 = math.sqrt(2)  # rows {1, 1, 0}: mean 2/3, std sqrt(2)/3 -> +1/sqrt(2), -sqrt(2)


@pytest.mark.parametrize(
    "objective, expected",
    [
        ("srpo", [A, A, -A, A, -A, 0.0]),  # one sample per event: the K=2 event counts once
        ("grpo", [1 / R2, 1 / R2, -R2, A, -A, 0.0]),  # one sample per row
        ("seq", [1 / R2, 1 / R2, -R2, A, -A, 0.0]),
        ("drmas", [A, 0.0, -A, A, -A, 0.0]),  # (prompt, role): role b is alone
    ],
)
def test_each_objective_trains_on_its_estimators_advantages(objective: str, expected: list[float]) -> None:
    inputs = AdvantageInputs(
        torch.tensor(EST_RETURNS), torch.tensor(EST_EVENTS), EST_PROMPTS, EST_TYPES, EST_ROLES
    )
    got = get_objective(objective).advantages(inputs)
    torch.testing.assert_close(got, torch.tensor(expected), atol=1e-5, rtol=0)


def test_advantage_estimators_registry() -> None:
    assert tuple(ADVANTAGE_ESTIMATORS)[:4] == ("event", "row", "agent", "episode")
    assert {get_objective(n).advantage for n in BUILTIN_OBJECTIVES} == {"event", "row", "agent", "episode"}
    with pytest.raises(ValueError, match="event, row, agent"):
        get_advantage_estimator("critic")
    with pytest.raises(ValueError, match="registered twice"):
        register_advantage_estimator("row")(lambda inputs, eps: inputs.returns)
    with pytest.raises(ValueError, match="one entry per row"):
        AdvantageInputs(torch.zeros(2), torch.zeros(2), ["p"], ["t", "t"], ["a", "a"])


def test_empty_rows_have_empty_advantages() -> None:
    empty = torch.zeros(0)
    no_ids = torch.zeros(0, dtype=torch.long)
    inputs = AdvantageInputs(empty, no_ids, [], [], [], no_ids, empty)
    for name in OBJECTIVES:
        assert get_objective(name).advantages(inputs).shape == (0,)
