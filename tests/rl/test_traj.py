"""Credit per trajectory (docs/objective.md §5, §6): the `episode` advantage estimator and the `traj`
objective (SRPO with the episode as one set), against values computed by hand."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.rl import get_objective, plan_batches, setwise_loss
from srpo_dsl.rl.loop.event_updates import event_updates
from srpo_dsl.rl.loop.update import atomic_ids
from srpo_dsl.rl.objective.advantages import AdvantageInputs
from srpo_dsl.rl.objective.plugins import training_objective
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime.episode import Episode, Event, Member
from tests.support.objective import random_batch

A = 0.5 / (0.5 + 1e-6)  # two returns {r1, r0}: mean and population std 0.5 apart, eps = 1e-6
TRAJ = get_objective("traj")


# --- the `episode` estimator ------------------------------------------------------------------


def _turn(episode: str, n: int, event_type: str) -> Event:
    member = Member(0, "researcher", 1, "lm", 0, [1], [2], [0.0], "x", True)
    return Event(f"{episode}/e{n}", event_type, event_type, "s", 1, True, [member])


def _episode(prompt: str, sample: int, turns: list[str], reward: float) -> Episode:
    ep = Episode(f"{prompt}/{sample}", prompt, sample, {})
    ep.events = [_turn(ep.episode_id, n, t) for n, t in enumerate(turns, 1)]
    ep.record_returns(reward, reward, {})
    return ep


LOOP, FORCED = "act:researcher", "act:researcher:answer"
# docs/objective.md §5's table: 2 prompts x G = 2 episodes of 1-3 turns (K = 1 each)
EPISODES = [
    _episode("p", 0, [LOOP, LOOP, LOOP], 1.0),  # searched twice, then answered right
    _episode("p", 1, [LOOP], 0.0),  # answered at once, wrong
    _episode("q", 0, [LOOP, LOOP, FORCED], 1.0),  # searched twice, answered right in the forced turn
    _episode("q", 1, [LOOP], 0.0),  # answered at once, wrong
]
S3, S2 = math.sqrt(3), math.sqrt(2)
# `event`: groups (prompt, event type), one sample per turn
#   (p, loop): returns 1, 1, 1, 0 -> mean 0.75, std sqrt(3)/4 -> +1/sqrt(3), -sqrt(3)
#   (q, loop): returns 1, 1, 0    -> mean 2/3,  std sqrt(2)/3 -> +1/sqrt(2), -sqrt(2)
#   (q, forced): the one forced turn alone -> 0
BY_EVENT = [1 / S3, 1 / S3, 1 / S3, -S3, 1 / S2, 1 / S2, 0.0, -S2]
# `episode`: groups (prompt), one sample per episode: returns 1, 0 in each -> +-1 on every turn
BY_EPISODE = [A, A, A, -A, A, A, A, -A]


def test_episode_advantages_of_the_doc_table() -> None:
    srpo = build_rows(EPISODES, "srpo")
    torch.testing.assert_close(srpo.advantages, torch.tensor(BY_EVENT), atol=1e-5, rtol=0)
    on_episodes = training_objective(TrainOptions(objective="srpo", advantage="episode"), Path("."))
    for objective in (on_episodes, "traj"):  # srpo on `advantage = episode`, and traj's own estimator
        rows = build_rows(EPISODES, objective)
        torch.testing.assert_close(rows.advantages, torch.tensor(BY_EPISODE), atol=1e-6, rtol=0)
    assert build_rows(EPISODES, "traj").episode_ids.tolist() == [0, 0, 0, 1, 2, 2, 2, 3]
    # the three-turn episode enters its group once: under `event` it pulls the mean to 0.75 and the
    # wrong answer down to -sqrt(3); the lone forced turn gets +1 instead of 0


def test_episode_credit_is_the_team_return_with_its_penalty() -> None:
    """Keyed per-member returns are not read by `episode`: one return per episode, `ep.team_return`."""
    eps = [_episode("p", 0, [LOOP, LOOP], 0.9), _episode("p", 1, [LOOP], -0.1)]  # -0.1: the penalty
    eps[0].record_returns(0.9, 0.9, {"researcher": 0.9, "researcher@1": 0.0})  # round 1 keyed to 0
    rows = build_rows(eps, "traj")
    assert rows.returns.tolist() == pytest.approx([0.0, 0.9, -0.1])  # the members' keyed returns
    torch.testing.assert_close(rows.advantages, torch.tensor([A, A, -A]), atol=1e-6, rtol=0)


def test_the_estimator_needs_episodes() -> None:
    inputs = AdvantageInputs(torch.zeros(2), torch.arange(2), ["p", "p"], ["t", "t"], ["r", "r"])
    with pytest.raises(ValueError, match="`episode` estimator needs each row's episode_ids"):
        TRAJ.advantages(inputs)
    with pytest.raises(ValueError, match=r"episode_ids \(3,\)"):
        AdvantageInputs(torch.zeros(2), torch.arange(2), ["p"] * 2, ["t"] * 2, ["r"] * 2, torch.zeros(3))


def test_rows_keep_their_episodes_when_selected() -> None:
    rows = build_rows(EPISODES, "traj")
    picked = rows.select([7, 0, 4])
    assert picked.episode_ids.tolist() == [3, 0, 2] and picked.num_episodes == 3 and rows.num_episodes == 4


# --- the `traj` objective -------------------------------------------------------------------------

PAD = 0.0
# Episode 10: event 1 (K = 2: rows 0, 1) and event 2 (K = 1: row 2); episode 20: event 3 (row 3).
# lp - old per token: row 0 [0.1, 0.05], row 1 [0.02], row 2 [-0.04, 0.03], row 3 [0.3]
#   -> l = 0.15, 0.02, -0.01 (episode 10: K = 3, sum 0.16) and 0.3 (episode 20: K = 1)
LP = [[-1.0, -0.5], [-0.3, PAD], [-2.0, -0.7], [-0.4, PAD]]
OLD = [[-1.1, -0.55], [-0.32, PAD], [-1.96, -0.73], [-0.7, PAD]]
MASK = [[1, 1], [1, 0], [1, 1], [1, 0]]
EVENTS = [1, 1, 2, 3]
EPISODE_IDS = [10, 10, 10, 20]
ADV = [1.0, 1.0, 1.0, 0.5]


def tensors(adv=ADV, episodes=EPISODE_IDS):
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    old, mask = torch.tensor(OLD, dtype=torch.float64), torch.tensor(MASK)
    return lp, old, mask, torch.tensor(EVENTS), torch.tensor(adv, dtype=torch.float64), torch.tensor(episodes)


@pytest.mark.parametrize("set_norm, c3", [("sqrt", 1 / math.sqrt(3)), ("mean", 1 / 3), ("none", 1.0)])
def test_traj_hand_values_and_gradient(set_norm: str, c3: float) -> None:
    # episode 10: rho = e^(c(3) 0.16) in [0.8, 1.2], A = 1: unclipped, term rho
    # episode 20: rho = e^0.3 = 1.3499 > 1.2 with A = 0.5 > 0: clipped, term 1.2 * 0.5, no gradient
    lp, old, mask, events, adv, episodes = tensors()
    rho = math.exp(c3 * 0.16)
    loss, metrics = TRAJ(lp, old, mask, events, adv, set_norm=set_norm, episode_ids=episodes)
    assert loss.item() == pytest.approx(-(rho * 1.0 + 1.2 * 0.5) / 2, abs=1e-12)
    (grad,) = torch.autograd.grad(loss, lp)
    g = -rho * 1.0 * c3 / 2  # d(-J)/d lp_u = -(1/|P|) rho A c(K) on every generated token of episode 10
    torch.testing.assert_close(
        grad, torch.tensor([[g, g], [g, 0.0], [g, g], [0.0, 0.0]], dtype=torch.float64)
    )
    assert metrics["num_episodes"] == metrics["num_units"] == 2 and metrics["mean_set_size"] == 2.0
    assert metrics["clip_fraction"] == 0.5 and "num_events" not in metrics
    assert metrics["ratio_mean"] == pytest.approx((rho + math.exp(0.3)) / 2)
    half, _ = TRAJ(*tensors()[:5], set_norm=set_norm, episode_ids=episodes, num_episodes=4)
    assert half.item() == pytest.approx(loss.item() / 2, abs=1e-12)  # a share of 4 episodes over ranks


def test_one_clip_per_episode_where_srpo_clips_no_event() -> None:
    """Two turns of l = 0.15 (K = 1 each): srpo's ratios e^0.15 = 1.162 stay inside 1.2; the episode's
    e^(0.3 / sqrt 2) = 1.236 does not: clipped for A > 0 (no gradient), kept for A < 0 (pessimistic)."""
    lp = torch.tensor([[-1.0], [-2.0]], dtype=torch.float64, requires_grad=True)
    old, mask, events = lp.detach() - 0.15, torch.ones(2, 1, dtype=torch.bool), torch.tensor([0, 1])
    one_episode = torch.tensor([5, 5])
    for a, clipped in ((1.0, True), (-1.0, False)):
        adv = torch.full((2,), a, dtype=torch.float64)
        _, srpo_metrics = setwise_loss(lp, old, mask, events, adv)
        assert srpo_metrics["clip_fraction"] == 0.0
        loss, metrics = TRAJ(lp, old, mask, events, adv, episode_ids=one_episode)
        rho = math.exp(0.3 / math.sqrt(2))
        assert loss.item() == pytest.approx(-(1.2 if clipped else -rho), abs=1e-12)
        assert metrics["clip_fraction"] == float(clipped)
        (grad,) = torch.autograd.grad(loss, lp)
        expected = 0.0 if clipped else rho / math.sqrt(2)  # d(-J)/d lp = -rho A c(2), A = -1
        torch.testing.assert_close(grad, torch.full((2, 1), expected, dtype=torch.float64))


@pytest.mark.parametrize("set_norm", ["sqrt", "mean", "none"])
def test_traj_equals_srpo_when_every_episode_is_one_event(set_norm: str) -> None:
    for seed in range(3):
        lp, old, mask, events, adv = random_batch(seed)
        episodes = events * 7 + 2  # another id for each event: one event per episode
        n = int(events.unique().numel())
        want, want_metrics = setwise_loss(lp, old, mask, events, adv, set_norm=set_norm, num_events=n + 3)
        got, got_metrics = TRAJ(
            lp, old, mask, events, adv, set_norm=set_norm, episode_ids=episodes, num_episodes=n + 3
        )
        assert got.item() == pytest.approx(want.item(), abs=1e-12)
        (want_grad,) = torch.autograd.grad(want, lp)
        (got_grad,) = torch.autograd.grad(got, lp)
        torch.testing.assert_close(got_grad, want_grad, atol=1e-12, rtol=0)
        assert got_metrics["num_episodes"] == want_metrics["num_events"] == n
        assert got_metrics["clip_fraction"] == want_metrics["clip_fraction"]


def test_traj_needs_episodes_and_one_advantage_per_episode() -> None:
    lp, old, mask, events, adv, episodes = tensors()
    with pytest.raises(ValueError, match="needs episode_ids"):
        TRAJ(lp, old, mask, events, adv)
    per_event = torch.tensor(
        [1.0, 1.0, -1.0, 0.5], dtype=torch.float64
    )  # events 1 and 2 of episode 10 differ
    with pytest.raises(ValueError, match="for traj: all rows of an episode"):
        TRAJ(lp, old, mask, events, per_event, episode_ids=episodes)
    with pytest.raises(ValueError, match=r"episode_ids \(3,\)"):
        TRAJ(lp, old, mask, events, adv, episode_ids=episodes[:3])
    with pytest.raises(ValueError, match="num_episodes=1 is smaller than the 2"):
        TRAJ(lp, old, mask, events, adv, episode_ids=episodes, num_episodes=1)


def test_off_policy_rows_weigh_each_episode_by_its_set_ratio() -> None:
    # log q_old - log mu per row: 0.3, -0.1, 0.2 (episode 10: sum 0.4) and 0.5 (episode 20)
    #   sqrt: w_10 = e^(0.4 / sqrt 3) = 1.2598, w_20 = e^0.5 = 1.6487 (each under C = 2)
    lp, old, mask, events, adv, episodes = tensors()
    mu = old - torch.tensor([[0.2, 0.1], [-0.1, 0.0], [0.25, -0.05], [0.5, 0.0]], dtype=torch.float64)
    loss, metrics = TRAJ(lp, old, mask, events, adv, episode_ids=episodes, behavior_logprobs=mu)
    rho, w10, w20 = math.exp(0.16 / math.sqrt(3)), math.exp(0.4 / math.sqrt(3)), math.exp(0.5)
    assert loss.item() == pytest.approx(-(w10 * rho + w20 * 1.2 * 0.5) / 2, abs=1e-12)
    assert metrics["importance_weight_mean"] == pytest.approx((w10 + w20) / 2)
    (grad,) = torch.autograd.grad(loss, lp)
    g = -w10 * rho / math.sqrt(3) / 2
    torch.testing.assert_close(
        grad, torch.tensor([[g, g], [g, 0.0], [g, g], [0.0, 0.0]], dtype=torch.float64)
    )
    same, _ = TRAJ(*tensors()[:5], episode_ids=episodes, behavior_logprobs=old.clone())  # mu = q_old
    assert torch.equal(same, TRAJ(*tensors()[:5], episode_ids=episodes)[0])  # w = 1 exactly


# --- layout: an episode is never split ---------------------------------------------------------------


def episode_batch(seed: int, num_episodes: int = 12, tokens: int = 6):
    """Rows of episodes of 1-3 events of 1-3 rows, shuffled; one advantage per episode; stale rows."""
    rng = random.Random(seed)
    events, episodes = [], []
    for p in range(num_episodes):
        for e in range(rng.randint(1, 3)):
            k = rng.randint(1, 3)
            events += [p * 10 + e] * k
            episodes += [p] * k
    order = list(range(len(events)))
    rng.shuffle(order)  # the rows of an episode need not be adjacent
    events, episodes = [events[i] for i in order], [episodes[i] for i in order]
    g = torch.Generator().manual_seed(seed)
    n = len(events)
    mask = torch.arange(tokens)[None, :] < torch.randint(1, tokens + 1, (n,), generator=g)[:, None]
    old = -torch.rand(n, tokens, generator=g, dtype=torch.float64) * 3
    lp = old + 0.1 * torch.randn(n, tokens, generator=g, dtype=torch.float64)
    mu = old - 0.2 * torch.rand(n, tokens, generator=g, dtype=torch.float64)
    adv = torch.randn(num_episodes, generator=g, dtype=torch.float64)[torch.tensor(episodes)]
    return lp.requires_grad_(), old, mask, torch.tensor(events), adv, torch.tensor(episodes), mu


@pytest.mark.parametrize("world_size, micro_batches", [(1, 3), (3, 2), (4, 4)])
def test_rank_and_micro_batch_layout_does_not_change_the_update(world_size: int, micro_batches: int) -> None:
    lp, old, mask, events, adv, episodes, mu = episode_batch(world_size * 10 + micro_batches)
    kwargs = {"clip_eps": 0.05, "num_episodes": 12}  # a small clip: some episodes clip
    full, metrics = TRAJ(lp, old, mask, events, adv, episode_ids=episodes, behavior_logprobs=mu, **kwargs)
    assert 0 < metrics["clip_fraction"] < 1
    (full_grad,) = torch.autograd.grad(full, lp)
    tokens = mask.sum(-1).tolist()
    total, grad = 0.0, torch.zeros_like(lp)
    plan = plan_batches(episodes.tolist(), tokens, world_size=world_size, micro_batches=micro_batches)
    for rank in plan:
        for micro in rank:
            if not micro:
                continue
            rows = torch.tensor(micro)
            part = (lp[rows], old[rows], mask[rows], events[rows], adv[rows])
            loss, _ = TRAJ(*part, episode_ids=episodes[rows], behavior_logprobs=mu[rows], **kwargs)
            total += loss.item()
            grad += torch.autograd.grad(loss, lp)[0]
    assert total == pytest.approx(full.item(), abs=1e-12)
    torch.testing.assert_close(grad, full_grad, atol=1e-12, rtol=0)


def test_a_split_episode_would_change_the_loss() -> None:
    """Why the update keeps episodes whole: traj on an episode cut in two is two sets, another loss."""
    lp, old, mask, events, adv, episodes = tensors()
    full, _ = TRAJ(lp, old, mask, events, adv, episode_ids=episodes, num_episodes=2)
    parts = [torch.tensor([0, 1]), torch.tensor([2, 3])]  # episode 10 across two micro-batches
    split = sum(
        TRAJ(lp[i], old[i], mask[i], events[i], adv[i], episode_ids=episodes[i], num_episodes=2)[0].item()
        for i in parts
    )
    assert split != pytest.approx(full.item(), abs=1e-6)


def test_the_update_plans_whole_episodes_for_traj_and_whole_events_for_srpo() -> None:
    from tests.support.training import make_episodes

    episodes = make_episodes(mixed=True, n_prompts=4)  # episodes of a K = 2 and a K = 1 event
    splits = {}
    for objective, ids in (("traj", "episode_ids"), ("srpo", "event_ids")):
        rows = build_rows(episodes, objective)
        atoms = atomic_ids(rows, get_objective(objective))
        assert atoms == getattr(rows, ids).tolist()
        tokens = [len(r) for r in rows.response_token_ids]
        homes: set[tuple[int, int]] = set()
        for micro_batches in (2, 5, 16):
            plan = plan_batches(atoms, tokens, world_size=1, micro_batches=micro_batches)[0]
            homes |= {
                (micro_batches, m * 1000 + int(rows.episode_ids[r])) for m, rs in enumerate(plan) for r in rs
            }
        by_episode = {(mb, key % 1000) for mb, key in homes}
        splits[objective] = len(homes) - len(by_episode)  # an episode in more than one micro-batch
    assert splits == {"traj": 0, "srpo": splits["srpo"]} and splits["srpo"] > 0  # srpo may split an episode


# --- what the traces record --------------------------------------------------------------------------


def test_each_event_records_its_episodes_one_clip() -> None:
    """EventUpdate.clip_fraction under traj: whether the event's episode's one ratio was clipped."""
    lp, old, mask, events, adv, episodes = tensors()
    _, _, terms = TRAJ.evaluate(lp, old, mask, events, adv, episode_ids=episodes)
    clips = terms.row_clips(4, events)  # episode 10 unclipped (events 1, 2), episode 20 clipped (event 3)
    assert clips.tolist() == [[0, 1], [0, 0], [0, 1], [1, 1]]
    members = [("ep10/e1", 0), ("ep10/e1", 1), ("ep10/e2", 0), ("ep20/e3", 0)]
    updates = event_updates(members, adv, clips)
    assert {e: u.clip_fraction for e, u in updates.items()} == {
        "ep10/e1": 0.0,
        "ep10/e2": 0.0,
        "ep20/e3": 1.0,
    }
    assert terms.row_clips(4).tolist() == [[0, 1], [0, 0], [0, 0], [1, 1]]  # without events: once per set


@pytest.mark.slow
def test_a_short_traj_run_of_the_tool_quickstart_traces_one_advantage_and_clip_per_episode(
    tmp_path: Path,
) -> None:
    """`srpo-dsl train workflows/quickstart_tools.srpo --option objective=traj`, 2 epochs (ratios move):
    every trained event of an episode carries the episode's advantage and its one clip."""
    import os
    import subprocess
    import sys

    from srpo_dsl.runtime.traces import read_traces

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    options = [
        "objective=traj",
        "batch=4",
        "group=4",
        "epochs=2",
        "eval_size=4",
        "eval_every=2",
        "save_every=2",
    ]
    out = tmp_path / "run"
    args = ["train", str(root / "workflows" / "quickstart_tools.srpo"), "--out", str(out), "--steps", "2"]
    args += ["--device", "cpu", *[a for o in options for a in ("--option", o)]]
    done = subprocess.run(
        [sys.executable, "-m", "srpo_dsl", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    episodes = read_traces(out / "traces.jsonl")
    assert len(episodes) == 16 and any(len(ep.events) > 1 for ep in episodes)
    for ep in episodes:
        updates = [e.update for e in ep.events if e.update is not None]
        assert updates and len({a for u in updates for a in u.advantages}) == 1
        assert len({u.clip_fraction for u in updates}) == 1  # 0, 0.5 or 1 over the two epochs
    by_prompt: dict[str, list[float]] = {}
    for ep in episodes:
        by_prompt.setdefault(ep.prompt_id, []).append(ep.events[0].update.advantages[0])
    for advantages in by_prompt.values():  # normalised over the prompt's 4 episodes: mean 0
        assert sum(advantages) == pytest.approx(0.0, abs=1e-5)


def test_traj_on_another_registered_estimator_is_one_error_before_training(tmp_path: Path) -> None:
    """`event` gives a loop turn and the forced turn of one episode different advantages: refused up front;
    `episode` and a Python estimator (checked at every step) are accepted."""
    with pytest.raises(
        ValueError, match="objective `traj` gives each episode one advantage, so it trains on `episode`"
    ):
        training_objective(TrainOptions(objective="traj", advantage="event"), tmp_path)
    (tmp_path / "mine.py").write_text("def estimate(inputs, eps):\n    return inputs.episode_returns\n")
    for advantage in (None, "episode", "mine.py:estimate"):
        objective = training_objective(TrainOptions(objective="traj", advantage=advantage), tmp_path)
        assert objective.advantage == (advantage or "episode")
    assert (
        training_objective(TrainOptions(objective="srpo", advantage="episode"), tmp_path).advantage
        == "episode"
    )
