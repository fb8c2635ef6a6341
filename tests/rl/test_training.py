"""Training: exact per-policy updates, micro-batch and rank invariance, ZeRO stages, resume, CLI.

Run as a script, this file is also the worker of the subprocess tests:
    python tests/rl/test_training.py update OUT.pt MODEL_DIR ...   (under torchrun: 2 ranks)
    python tests/rl/test_training.py train WORKFLOW OUT MODEL_A MODEL_B STEPS
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.training import (  # noqa: F401  (`one_thread`: the autouse fixture, one torch thread)
    CONVERSATION_TEMPERATURES,
    ROOT,
    SGD,
    TEAM,
    TEAMS,
    TEMPERATURES,
    assert_close,
    assert_same_update,
    build,
    chained_rows,
    conversation_episodes,
    make_episodes,
    one_thread,
    parameters,
    policy_spec,
    train_env,
    varied_reward,
    write_team,
)

HERE = Path(__file__).resolve()

# --- rows -------------------------------------------------------------------------------------


def test_rows_group_by_prompt_and_event_type_and_share_event_advantages():
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=False), "srpo")
    assert len(rows) == 3 * 4 * 3 and rows.num_events == 3 * 4 * 2 and rows.dropped_events == 0
    for e in rows.event_ids.unique():
        adv = rows.advantages[rows.event_ids == e]
        assert (adv == adv[0]).all()
    k2 = [i for i, t in enumerate(rows.event_types) if t == "parallel:solver"]
    assert len({int(rows.event_ids[i]) for i in k2}) == len(k2) // 2
    drmas = build_rows(make_episodes(mixed=False), "drmas")  # (prompt, role) groups
    assert drmas.advantages.shape == rows.advantages.shape


def test_rows_follow_the_turns_they_continue_and_select_remaps_them():
    """A row continues the previous row of its (episode, role, replica, policy) when its prompt begins with
    that row's prompt + response ids; not when the ids differ (a truncated response, a resampled try);
    `select` remaps the links, a row continued but not selected leaves none; a conversation costs its last
    row's tokens once, and its events are one micro-batch atom."""
    import dataclasses

    from srpo_dsl.rl.loop.update import atomic_ids
    from srpo_dsl.rl.objective.losses import get_objective
    from srpo_dsl.rl.objective.rows import build_rows

    episodes = conversation_episodes()
    rows = build_rows(episodes, "srpo")
    assert rows.follows == [f + 7 * e if f >= 0 else -1 for e in range(6) for f in [-1, -1, -1, 2, 0, 1, 3]]
    talk = [2, 3, 6]  # one conversation's rows: each counts its new tokens, the whole its last row's length
    assert sum(rows.new_tokens[i] for i in talk) == rows.lengths[6] < sum(rows.lengths[i] for i in talk)
    atoms = atomic_ids(
        rows, get_objective("srpo"), packed=True
    )  # per episode: the solvers' events, the talker's
    assert [len(set(atoms[7 * e : 7 * e + 7])) for e in range(6)] == [2] * 6
    assert atoms[0] == atoms[1] == atoms[4] == atoms[5] != atoms[2] == atoms[3] == atoms[6]
    assert atomic_ids(rows, get_objective("srpo")) == rows.event_ids.tolist()  # row by row: events alone
    third, second = episodes[0].events[4].members[0], episodes[0].events[2].members[0]
    cut = [*second.prompt_token_ids, *second.response_token_ids[:-1], 9]  # not the turn's ids verbatim
    episodes[0].events[4].members[0] = dataclasses.replace(third, prompt_token_ids=cut)
    resampled = episodes[1].events[2].members[0]  # a try of talker 2: its prompt, another response
    episodes[1].events[2].tries.append(
        dataclasses.replace(resampled, response_token_ids=[5], behavior_logprobs=[-1.0])
    )
    changed = build_rows(episodes, "srpo")
    assert changed.members[11] == ("q0/1/e2/try1", 0)  # after talker 2 (row 10); talker 3 (row 14) after it
    assert changed.follows[:15] == [-1, -1, -1, 2, 0, 1, -1, -1, -1, -1, 9, -1, 7, 8, -1]
    assert changed.new_tokens[6] == changed.lengths[6]
    picked = rows.select([6, 5, 3, 0, 4])  # talker 3, solver 2 of round 2, talker 2, solver 1 of rounds 1, 2
    assert picked.follows == [2, -1, -1, -1, 3]


def test_incomplete_events_are_dropped_whole_and_never_trained():
    from srpo_dsl.rl.objective.rows import build_rows

    clean = make_episodes(mixed=False)
    broken = make_episodes(mixed=False)
    extra = broken[0].events[0]
    broken[0].events.append(
        type(extra)("q0/0/e3", "parallel:solver", "n1", "z", 2, False, [extra.members[0]])
    )
    broken[1].events.append(type(extra)("q0/1/e3", "parallel:solver", "n1", "z", 2, True, [extra.members[0]]))
    broken[2].events.append(type(extra)("q0/2/e3", "parallel:solver", "n1", "z", 3, False, []))
    a, b = build_rows(clean, "srpo"), build_rows(broken, "srpo")
    assert b.dropped_events == 3 and a.dropped_events == 0
    assert b.prompt_token_ids == a.prompt_token_ids and b.response_token_ids == a.response_token_ids
    assert (b.event_ids == a.event_ids).all() and (b.advantages == a.advantages).all()


# --- the update ---------------------------------------------------------------------------------


def joint_autograd_step(models, entropy_coef: float = 0.0, objective: str = "srpo"):
    """The SGD(lr 1) parameters after one backward of the JOINT objective over both models, and its loss."""
    import torch
    from transformers import AutoModelForCausalLM

    from srpo_dsl.rl.loop.update import UpdateBatch, response_logprobs
    from srpo_dsl.rl.objective.losses import get_objective
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), objective)
    ref = {name: AutoModelForCausalLM.from_pretrained(path).eval() for name, path in zip("ab", models)}
    batch = UpdateBatch.of(rows, TEMPERATURES)
    width = batch.mask.shape[1]
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.shape[1]))  # noqa: E731
    logprobs, entropy = torch.zeros(len(rows), width), torch.zeros(len(rows), width)
    for name, model in ref.items():
        idx = torch.tensor([i for i, p in enumerate(rows.policies) if p == name])
        lp, h = response_logprobs(
            model,
            [rows.prompt_token_ids[i] for i in idx],
            [rows.response_token_ids[i] for i in idx],
            0,
            1.0,
            torch.device("cpu"),
            True,
        )
        logprobs, entropy = logprobs.index_put((idx,), pad(lp)), entropy.index_put((idx,), pad(h))
    # old = rollout log-probs: ratios far from 1, some events clipped
    loss, metrics = get_objective(objective)(
        logprobs,
        batch.behavior_logprobs,
        batch.mask,
        rows.event_ids,
        rows.advantages,
        clip_eps=0.2,
        episode_ids=rows.episode_ids,
    )
    mean_entropy = entropy[batch.mask].sum() / batch.mask.sum()  # over the step's generated tokens
    loss = loss - entropy_coef * mean_entropy
    loss.backward()
    with torch.no_grad():
        expected = {f"{n}.{k}": v - v.grad for n, m in ref.items() for k, v in m.named_parameters()}
    return rows, expected, loss.item(), metrics | {"entropy": mean_entropy.item()}


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["srpo", "traj"])
def test_detached_per_policy_update_equals_joint_autograd(models, dist, objective):
    """Two separate models in one event (traj: in one episode): W = dloss/dlogprobs per policy == backward
    of the joint objective."""
    from srpo_dsl.rl.loop.update import update

    rows, expected, loss, metrics = joint_autograd_step(models, objective=objective)
    assert 0 < metrics["clip_fraction"] < 1
    policies, opts = build(dict(zip("ab", models)), dist, old_logprobs="rollout", objective=objective)
    before = parameters(policies)
    stats = update(policies, rows, opts, dist, TEMPERATURES)
    assert stats["loss"] == pytest.approx(loss, rel=1e-5)
    got = parameters(policies)
    assert_close(got, expected)
    assert max((got[k] - before[k]).abs().max().item() for k in got) > 1e-3  # a real step was taken


@pytest.mark.slow
def test_entropy_bonus_update_equals_joint_autograd(models, dist):
    """With `entropy = c`, the per-policy update equals autograd of J's loss minus c * mean token entropy."""
    from srpo_dsl.rl.loop.update import update

    rows, expected, loss, metrics = joint_autograd_step(models, entropy_coef=0.5)
    assert metrics["entropy"] > 0
    policies, opts = build(dict(zip("ab", models)), dist, old_logprobs="rollout", entropy=0.5)
    stats = update(policies, rows, opts, dist, TEMPERATURES)
    assert stats["loss"] == pytest.approx(loss, rel=1e-5)
    assert_close(parameters(policies), expected)


def test_token_entropy_matches_the_softmax(models):
    import torch
    from transformers import AutoModelForCausalLM

    from srpo_dsl.backends.logprobs import pack_sequences, token_logprobs

    model = AutoModelForCausalLM.from_pretrained(models[0]).eval()
    batch = pack_sequences([[1, 5, 7], [1, 4]], [[9, 3], [8, 8, 2]], 0)
    lp, h = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, 0.7, True)
    assert torch.equal(
        lp, token_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, 0.7)
    )
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1] / 0.7
    p = logits.softmax(-1)
    manual = torch.nn.functional.pad(-(p * p.log()).sum(-1), (1, 0))
    assert torch.allclose(h, torch.where(batch.response_mask, manual, 0.0), atol=1e-5)
    assert (h[batch.response_mask] > 0).all() and (h[~batch.response_mask] == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["srpo", "grpo", "seq", "traj"])
def test_one_micro_batch_equals_two(models, dist, objective):
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), objective)
    results = []
    for micro in (1, 2):
        policies, opts = build(
            {"a": models[0], "b": models[1]},
            dist,
            objective=objective,
            micro_batches=micro,
            epochs=2,
            grad_clip=0.5,
        )
        stats = update(policies, rows, opts, dist, TEMPERATURES)
        results.append((parameters(policies), stats))
    assert_same_update(results[0], results[1])


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "zero"), [("srpo", 0), ("traj", 0), ("srpo", 2)])
def test_a_token_budget_steps_like_one_micro_batch(models, dist, objective, zero):
    """Micro-batches filled to a token budget (as many as it needs: the boundary is set by the plan, not by
    DeepSpeed's counter) give the update of one micro-batch, two epochs over them."""
    from srpo_dsl.rl.loop.update import atomic_ids, micro_plan, update
    from srpo_dsl.rl.objective.plugins import training_objective
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), objective)
    tokens = [len(a) + len(b) for a, b in zip(rows.prompt_token_ids, rows.response_token_ids)]
    results = []
    for budget in (None, 3 * max(tokens)):
        options = {"objective": objective, "zero": zero, "epochs": 2, "grad_clip": 0.5}
        policies, opts = build(
            {"a": models[0], "b": models[1]}, dist, max_tokens_per_micro_batch=budget, **options
        )
        plan = micro_plan(atomic_ids(rows, training_objective(opts, Path("."))), tokens, opts)
        stats = update(policies, rows, opts, dist, TEMPERATURES)
        results.append((parameters(policies), stats, plan))
    assert len(results[0][2]) == 1 and len(results[1][2]) >= 3  # the budget made several micro-batches
    assert all(len(m) * max(tokens[i] for i in m) <= 3 * max(tokens) for m in results[1][2] if len(m) > 1)
    assert_same_update(results[0], results[1])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("objective", "options"),
    [
        ("srpo", {"pack_rows": True}),
        ("traj", {"pack_rows": True, "max_tokens_per_micro_batch": 40}),
        ("srpo", {"pack_rows": True, "gradient_checkpointing": True, "entropy": 0.5}),
    ],
)
def test_packed_rows_step_like_padded_ones(models, dist, objective, options):
    """Rows packed into one sequence without padding (positions restarting per row) give today's update:
    loss, gradient norm and weights to 1e-6, also with a token budget, checkpointing and an entropy bonus."""
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), objective)
    results = []
    for packed in ({}, options):
        base = {"objective": objective, "epochs": 2, "grad_clip": 0.5, "entropy": options.get("entropy", 0.0)}
        policies, opts = build({"a": models[0], "b": models[1]}, dist, **(base | packed))
        results.append((parameters(policies), update(policies, rows, opts, dist, TEMPERATURES)))
    assert_same_update(results[0], results[1])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("objective", "options"),
    [
        ("srpo", {"set_norm": "none"}),
        ("srpo", {"set_norm": "sqrt", "max_tokens_per_micro_batch": 40}),
        ("srpo", {"set_norm": "mean", "stale": True}),  # off-policy rows, old log-probs recomputed
        ("srpo", {"set_norm": "sqrt", "kl": 0.5}),  # the reference's no-grad pass packed too
        ("grpo", {}),
        ("traj", {}),
        ("srpo", {"adapters": True}),  # adapters a and b on one base
    ],
)
def test_conversations_packed_in_one_pass_step_like_cached_rows(
    models, dist, tmp_path, monkeypatch, objective, options
):
    """Multi-turn conversations (`conversation_episodes`), each scored in one packed pass over its last turn,
    give the update of cached per-row scoring: weights, loss, clip fraction to 1e-6, grad norm to 1e-5
    (relative), two epochs; off-policy, with a token budget, and with adapters too."""
    import torch

    from srpo_dsl.rl.loop import update as update_module
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(conversation_episodes(), objective)
    options = dict(options)
    adapters, stale = options.pop("adapters", False), options.pop("stale", False)
    off_policy = torch.arange(len(rows)) % 3 == 0 if stale else None
    links: list[int] = []  # the most linked row each scoring call was given
    scored = update_module.response_logprobs
    spy = lambda *a, **kw: links.append(max(kw.get("follows") or [-1])) or scored(*a, **kw)  # noqa: E731
    monkeypatch.setattr(update_module, "response_logprobs", spy)
    results = []
    for packed in (False, True):
        chosen = {"objective": objective, "epochs": 2, "grad_clip": 0.5, "pack_rows": packed, **options}
        if adapters:
            from tests.support.adapters import shared

            policies, opts = shared(models[0], tmp_path, dist, **chosen)
        else:
            policies, opts = build({"a": models[0], "b": models[1]}, dist, **chosen)
        stats = update_module.update(policies, rows, opts, dist, CONVERSATION_TEMPERATURES, stale=off_policy)
        results.append((parameters(policies), stats))
    assert max(links) >= 0  # the packed update passed the conversations' links
    (cached, a), (packed_weights, b) = results
    assert_close(cached, packed_weights, atol=1e-6)
    for key in ("loss", "clip_fraction", *(("importance_weight_mean",) if stale else ())):
        assert a[key] == pytest.approx(b[key], abs=1e-6), key
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5) and a["clip_fraction"] > 0


def test_packed_log_probs_are_the_padded_ones(models):
    """`packed_logprobs` against the cached two-pass scoring, entropies included, rows of unequal lengths
    packed two to a sequence (as long as the longest row, 10 tokens: 7 + 3 and 5 + ...)."""
    import torch
    from transformers import AutoModelForCausalLM

    from srpo_dsl.backends.logprobs import pack_into, response_logprobs

    model = AutoModelForCausalLM.from_pretrained(models[0]).eval()
    prompts = [[1, 5, 7, 9], [1, 5, 7, 9], [1, 4], [1, 6]]
    responses = [[3, 3, 2], [6], [9, 9, 9, 9, 9, 9, 9, 2], [5]]
    args = (model, prompts, responses, 0, 0.7, torch.device("cpu"), True)
    (lp, h), (packed, packed_h) = response_logprobs(*args), response_logprobs(*args, scoring="packed")
    assert packed.shape == lp.shape == (4, 8) and (packed[1, 1:] == 0).all()
    assert torch.allclose(packed, lp, atol=1e-5) and torch.allclose(packed_h, h, atol=1e-5)
    assert pack_into([7, 5, 10, 3], 10) == [[2], [0, 3], [1]]  # several rows share a sequence


@pytest.mark.parametrize("adapters", [False, True])
def test_chained_rows_are_scored_in_one_pass_over_their_last(models, adapters):
    """Rows of a conversation, `follows` linking them, read their log-probs (and entropies) from one packed
    segment, the conversation's last row: the cached per-row scores to 1e-5, and the model runs over the
    conversations' last rows only; with adapters, each conversation through its own (LoRA weights made
    non-zero: the base alone would score differently)."""
    import torch
    from transformers import AutoModelForCausalLM

    from srpo_dsl.backends.logprobs import response_logprobs
    from srpo_dsl.rl.engines.adapters import with_adapters
    from tests.support.adapters import LORA_A, LORA_B

    model = AutoModelForCausalLM.from_pretrained(models[0]).eval()
    prompts, responses, follows, names = chained_rows()
    if adapters:
        model = with_adapters(model, {"x": LORA_A, "y": LORA_B}).eval()
        generator = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_" in name:
                    p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    seen: list = []
    model.register_forward_pre_hook(lambda _, args, kw: seen.append(kw["input_ids"]), with_kwargs=True)
    args = (model, prompts, responses, 0, 0.7, torch.device("cpu"), True, names if adapters else None)
    lp, h = response_logprobs(*args)
    seen.clear()
    packed, packed_h = response_logprobs(*args, scoring="packed", follows=follows)
    assert packed.shape == lp.shape == (6, max(map(len, responses)))
    assert torch.allclose(packed, lp, atol=1e-5) and torch.allclose(packed_h, h, atol=1e-5)
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    tails = sum(n for i, n in enumerate(lengths) if i not in follows)  # 3 sequences: 2 conversations, 1 row
    assert len(seen) == 1 and int((seen[0] != 0).sum()) == tails < sum(lengths)
    if adapters:
        assert seen[0].shape[0] == 3  # a sequence per adapter
        base = response_logprobs(*args[:-1], ["__base__"] * 6, scoring="packed", follows=follows)[0]
        assert (base - lp).abs().max() > 1e-3
    with pytest.raises(ValueError, match="not the start of row"):
        response_logprobs(*args, scoring="packed", follows=[-1, -1, 0, -1, -1, -1])


def test_rows_pack_first_fit_longest_first():
    from srpo_dsl.backends.logprobs import pack_into

    # lengths 5, 9, 3, 4, 12 into 10, longest first: 12 alone (over the width), 9 (1 left), 5 (5 left),
    # 4 joins the 5 (1 left), 3 fits nowhere: a sequence of its own
    assert pack_into([5, 9, 3, 4, 12], 10) == [[4], [1], [0, 3], [2]]
    assert pack_into([2, 2, 2], 10) == [[0, 1, 2]]


@pytest.mark.slow
def test_gradient_checkpointing_recomputes_the_layers_and_steps_alike(models, dist):
    """With `gradient_checkpointing`, every layer runs again in the backward pass (dropout still off),
    and the update is the same."""
    from collections import Counter

    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), "srpo")
    results = []
    for checkpointing in (False, True):
        policies, opts = build({"a": models[0], "b": models[1]}, dist, gradient_checkpointing=checkpointing)
        modules = dict(policies["a"].module.named_modules())
        calls: list[str] = []  # a pass over the embeddings, then its first layer's attention (again)
        for name in ("embed_tokens", "layers.0.self_attn"):
            module = next(m for n, m in modules.items() if n.endswith(name))
            module.register_forward_pre_hook(lambda *_, name=name, calls=calls: calls.append(name))
        stats = update(policies, rows, opts, dist, TEMPERATURES)
        results.append((parameters(policies), stats, calls))
        assert not policies["a"].module.training  # the module itself stays in eval mode
    plain, checkpointed = (Counter(calls) for *_, calls in results)
    assert plain["layers.0.self_attn"] == plain["embed_tokens"] > 0
    assert checkpointed["layers.0.self_attn"] == 2 * checkpointed["embed_tokens"]  # again in the backward
    assert_same_update(results[0], results[1])


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stages_step_like_stage_0(models, dist, stage):
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), "srpo")
    out = {}
    for zero in (0, stage):
        policies, opts = build(
            {"a": models[0], "b": models[1]}, dist, zero=zero, micro_batches=2, grad_clip=0.5
        )
        out[zero] = parameters(policies), update(policies, rows, opts, dist, TEMPERATURES)
        # one process at stage 0: no gradient "all-reduce" over one rank (and its flat copy)
        assert policies["a"].engine.enable_backward_allreduce == (zero != 0)
        if zero == 3:
            assert all(
                p.ds_numel and p.numel() == 0 for p in policies["a"].module.parameters()
            )  # partitioned
    assert_close(out[0][0], out[stage][0])
    assert out[0][1]["grad_norm"] == pytest.approx(out[stage][1]["grad_norm"], rel=1e-4)


@pytest.mark.slow
def test_lora_trains_adapters_only_and_kl_uses_a_frozen_reference(models, dist):
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.engines.ds_engine import ds_config
    from srpo_dsl.rl.engines.policies import build_policy
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    opts = TrainOptions(kl=0.5, lr=1e-2)
    lora = {"r": 4, "alpha": 8, "dropout": 0.0, "targets": "all-linear"}
    config = ds_config(opts, device="cpu", world_size=1)
    policies = {
        "a": build_policy("a", str(models[0]), policy_spec(trainable=True, lora=lora), opts, dist, config),
        "b": build_policy("b", str(models[1]), policy_spec(trainable=False), opts, dist, config),
    }
    assert policies["b"].engine is None and policies["a"].reference is not None
    before = parameters(policies)
    rows = build_rows(make_episodes(mixed=True), "srpo")
    first = update(policies, rows, opts, dist, TEMPERATURES)
    second = update(policies, rows, opts, dist, TEMPERATURES)
    after = parameters(policies)
    changed = {k for k in after if (after[k] != before[k]).any()}
    assert changed and all(".lora_" in k for k in changed)
    assert (
        first["num_events"] == 24 and second["loss"] != first["loss"]
    )  # the KL term grows once weights move


def test_ds_config_merges_user_overrides_and_checks_them():
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.engines.ds_engine import ds_config

    opts = TrainOptions(zero=2, micro_batches=4, grad_clip=0.5)
    config = ds_config(
        opts,
        device="cpu",
        world_size=2,
        offload="optimizer",
        user={"zero_optimization": {"reduce_bucket_size": 1000}},
    )
    assert config["gradient_accumulation_steps"] == 4 and config["train_batch_size"] == 8
    assert (
        config["zero_optimization"]["stage"] == 2
        and config["zero_optimization"]["reduce_bucket_size"] == 1000
    )
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert config["gradient_clipping"] == 0.5 and not config["bf16"]["enabled"]
    assert ds_config(opts, device="cuda", world_size=1)["bf16"]["enabled"]
    with pytest.raises(ValueError, match="micro-batches"):
        ds_config(opts, device="cpu", world_size=1, user={"gradient_accumulation_steps": 2})
    with pytest.raises(ValueError, match="ZeRO stage 3"):
        ds_config(opts, device="cpu", world_size=1, offload="params")


def test_data_order_is_a_fixed_permutation_per_pass():
    from srpo_dsl.rl.distributed.data_order import step_prompts

    steps = [step_prompts(10, 3, s, seed=7) for s in range(1, 7)]
    assert steps == [step_prompts(10, 3, s, seed=7) for s in range(1, 7)]
    first, second = [i for s in steps[:3] for i in s], [i for s in steps[3:] for i in s]
    assert len(set(first)) == 9 and len(set(second)) == 9  # 3 steps per pass
    assert steps[:3] != steps[3:6] and step_prompts(10, 3, 1, seed=8) != steps[0]


def sharded_update(dist, model_a: str, model_b: str, objective: str = "srpo") -> tuple[dict, dict]:
    """Each rank updates on its share of the events (traj: of the episodes; 2 micro-batches, 2 epochs,
    clipping)."""
    from srpo_dsl.rl.loop.update import atomic_ids, update
    from srpo_dsl.rl.objective.losses import get_objective
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), objective)
    atoms = atomic_ids(rows, get_objective(objective))
    mine = [i for i, e in enumerate(atoms) if e % dist.world_size == dist.rank]
    policies, opts = build(
        {"a": model_a, "b": model_b}, dist, micro_batches=2, epochs=2, grad_clip=0.5, objective=objective
    )
    stats = update(policies, rows.select(mine), opts, dist, TEMPERATURES)
    return parameters(policies), stats


def update_worker(out: str, model_a: str, model_b: str, objective: str) -> None:
    import torch

    from srpo_dsl.rl.distributed.process_group import init_distributed

    dist = init_distributed("cpu")
    params, stats = sharded_update(dist, model_a, model_b, objective)
    if dist.rank == 0:
        torch.save({"params": params, "stats": stats}, out)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("objective", ["srpo", "traj"])
def test_two_gloo_ranks_match_one_process(models, dist, tmp_path, objective):
    import torch

    ops = tmp_path / "torch_extensions"  # where DeepSpeed would compile its shared-memory op: it must not
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(ops)}
    out = tmp_path / "params.pt"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_port",
        str(_free_port()),
        str(HERE),
        "update",
        str(out),
        str(models[0]),
        str(models[1]),
        objective,
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not ops.exists()  # no op was compiled (the first multi-rank run used to spend ~60 s on one)
    two = torch.load(out, weights_only=False)
    params, stats = sharded_update(dist, str(models[0]), str(models[1]), objective)
    assert_close(params, two["params"])
    assert stats["loss"] == pytest.approx(two["stats"]["loss"], abs=1e-6)
    assert stats["num_events"] == two["stats"]["num_events"] == 24


# --- the loop: checkpoints, resume, ZeRO-3 rollouts -----------------------------------------------


def train_worker(workflow: str, out: str, model_a: str, model_b: str, overrides: str, *flags: str) -> None:
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import train

    varied_reward()
    train(
        plan_file(
            Path(workflow),
            Path(out),
            json.loads(overrides),
            "--resume" in flags,
            models={"a": model_a, "b": model_b, "base": model_a},
        ),
        progress=False,
    )


def _free_port() -> int:
    from srpo_dsl.rl.distributed.process_group import free_port

    return free_port()


def _train_cmd(
    workflow: Path,
    out: Path,
    models: tuple[Path, Path],
    *flags: str,
    overrides: str = '{"steps": 6}',
    launcher: tuple[str, ...] = (),
) -> list[str]:
    return [
        sys.executable,
        *launcher,
        str(HERE),
        "train",
        str(workflow),
        str(out),
        str(models[0]),
        str(models[1]),
        overrides,
        *flags,
    ]


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("team", list(TEAMS))
def test_sigkill_then_resume_continues_exactly(models, tmp_path, team):
    workflow = write_team(tmp_path / "wf", TEAMS[team])
    env = train_env()
    full, cut = tmp_path / "full", tmp_path / "cut"
    done = subprocess.run(
        _train_cmd(workflow, full, models), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]

    child = subprocess.Popen(
        _train_cmd(workflow, cut, models), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 240
    while not (cut / "checkpoints" / "step-2").exists() and child.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert (cut / "checkpoints" / "step-2" / "state.json").exists()
    done = subprocess.run(
        _train_cmd(workflow, cut, models, "--resume"), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]

    a, b = _metrics(full), _metrics(cut)
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 7))
    for x, y in zip(a, b):
        for key in ("loss", "grad_norm", "return", "clip_fraction", "response_length"):
            assert x[key] == pytest.approx(y[key], rel=1e-6, abs=1e-9), (x["step"], key)
    assert any(r["loss"] != 0 for r in a) and any(r["clip_fraction"] > 0 for r in a)
    evals = [json.loads(line)["step"] for line in (cut / "eval.jsonl").read_text().splitlines()]
    assert evals == [0, 2, 4, 6]
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == ["step-2", "step-4", "step-6"]
    config = json.loads((cut / "config.json").read_text())
    assert config["options"]["objective"] == "srpo" and config["graph_hash"]
    assert list((cut / "tb").iterdir())
    saved = sorted(p.name for p in (cut / "checkpoints" / "step-6").iterdir() if p.is_dir())
    assert saved == (["base"] if team == "adapters" else ["a", "b"])  # one engine for both adapters


@pytest.mark.slow
def test_resuming_with_another_adapter_layout_is_refused(models, tmp_path):
    from srpo_dsl.rl.loop.trainer import TrainError

    workflow = write_team(tmp_path / "wf", TEAMS["adapters"])
    done = subprocess.run(
        _train_cmd(workflow, tmp_path / "run", models, overrides='{"steps": 2}'),
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    workflow.write_text(TEAMS["adapters"].replace("adapter(base, r = 2, alpha = 4)", "adapter(base, r = 8)"))
    with pytest.raises(
        TrainError,
        match=r"cannot resume .*step-2: changed since it was written: graph_hash was .*; adapters was ",
    ):
        train_worker(
            str(workflow), str(tmp_path / "run"), str(models[0]), str(models[1]), '{"steps": 4}', "--resume"
        )


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_two_ranks_one_idle_match_one_process(models, tmp_path, dist, monkeypatch):
    """ZeRO-3 generation runs without collectives: a rank with no prompt neither hangs nor changes the update."""
    from srpo_dsl.envs.rewards import REWARDS
    from srpo_dsl.errors import UsageError
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import TrainError, train
    from srpo_dsl.runtime.traces import read_traces

    monkeypatch.setitem(REWARDS, "f1", lambda pred, task, field: float(len(pred or "") % 2))
    workflow = write_team(tmp_path / "wf")
    overrides = {"steps": 2, "zero": 3, "micro_batches": 2, "batch": 1}
    models_ = {"a": str(models[0]), "b": str(models[1])}
    one = train(plan_file(workflow, tmp_path / "one", overrides, models=models_), progress=False)
    assert len({t.prompt_id for t in read_traces(tmp_path / "one" / "traces.jsonl")}) == 1  # step 2's prompt
    assert len(read_traces(tmp_path / "one" / "traces.jsonl")) == 4  # its prompt x group 4
    launcher = ("-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(_free_port()))
    done = subprocess.run(
        _train_cmd(workflow, tmp_path / "two", models, overrides=json.dumps(overrides), launcher=launcher),
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    two = _metrics(tmp_path / "two")
    assert [r["num_events"] for r in one] == [r["num_events"] for r in two] == [8, 8]
    for x, y in zip(one, two):
        for key in ("loss", "grad_norm", "return", "mean_set_size"):
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-7), (x["step"], key)
    assert one[0]["mean_set_size"] == pytest.approx(1.5) and any(r["grad_norm"] > 0 for r in one)
    with pytest.raises(UsageError, match=r"already exists .*pass --resume"):
        train(plan_file(workflow, tmp_path / "one", overrides, models=models_))
    with pytest.raises(
        TrainError, match=r"cannot resume .*: changed since it was written: lr was .*, now 0\.5"
    ):
        train(
            plan_file(workflow, tmp_path / "one", {**overrides, "steps": 3, "lr": 0.5}, True, models=models_)
        )


# --- the CLI ------------------------------------------------------------------------------------


def _app():
    import typer

    from srpo_dsl.cli.train_cmds import plot_cmd, train_cmd

    app = typer.Typer()
    app.command("train")(train_cmd)
    app.command("plot")(plot_cmd)
    return app


def test_plot_writes_the_pngs(tmp_path):
    from typer.testing import CliRunner

    rng = random.Random(0)
    rows = [
        {
            "step": s,
            "return": rng.random(),
            "grad_norm": rng.random(),
            "response_length": 10 + s,
            "mean_set_size": 1.5,
            "loss": 0.0,
        }
        for s in range(1, 31)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(_app(), ["plot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    names = {
        "return.png",
        "grad_norm.png",
        "response_length.png",
        "mean_set_size.png",
        "training_dynamics.png",
    }
    assert {p.name for p in (tmp_path / "plots").iterdir()} == names
    assert all((tmp_path / "plots" / n).read_bytes()[:4] == b"\x89PNG" for n in names)


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "missing.srpo"], "no such file"),
        (["train", "{wf}", "--ds-config", "missing.json"], "no such file"),
        (["train", "{wf}", "--ds-config", "{bad}"], "invalid JSON"),
        (["train", "{wf}", "--batch", "1000", "--model", "{model}"], "only 64"),
        (["train", "{wf}", "--model", "nope=x"], "no policy `nope`"),
        (["train", "{broken}"], "error[E"),
        (["train", "{wf}", "--backend", "vllm", "--device", "cpu"], "--backend vllm needs a CUDA GPU"),
        (["train", "{wf}", "--objective", "traj", "--option", "advantage=event"], "trains on `episode`"),
        (["plot", "{tmp}"], "no such file"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, models, args, message):
    from typer.testing import CliRunner

    from srpo_dsl.errors import SrpoDslError

    workflow = write_team(tmp_path / "wf")
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "broken.srpo").write_text("workflow x\nagent y uses nothing\n")
    values = {
        "wf": workflow,
        "bad": tmp_path / "bad.json",
        "model": models[0],
        "broken": tmp_path / "broken.srpo",
        "tmp": tmp_path,
    }
    result = CliRunner().invoke(_app(), [a.format(**values) for a in args])
    assert isinstance(result.exception, SrpoDslError), result.output
    text = str(result.exception)
    assert message in text and "\n" not in text and result.exception.exit_code != 0


def test_out_of_gpu_memory_is_one_line_with_the_remedies(tmp_path, monkeypatch):
    import torch
    from typer.testing import CliRunner

    from srpo_dsl.errors import SrpoDslError
    from srpo_dsl.rl.loop import trainer

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.64 GiB.\nmore lines")

    monkeypatch.setattr(trainer, "train", out_of_memory)
    result = CliRunner().invoke(
        _app(), ["train", str(write_team(tmp_path / "wf")), "--out", str(tmp_path / "r")]
    )
    assert isinstance(result.exception, SrpoDslError) and result.exception.exit_code == 1
    text = str(result.exception)
    assert text.startswith("out of GPU memory: use a higher --zero stage") and "--micro-batches" in text
    assert "\n" not in text and not (tmp_path / "r").exists()


if __name__ == "__main__":
    {"update": update_worker, "train": train_worker}[sys.argv[1]](*sys.argv[2:])
