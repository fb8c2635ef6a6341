"""Sampling seeds through a real `train` run: every draw of a training step (and of the whole run) has a
seed of its own, and a step's draws do not depend on how its prompts are split over ranks."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from srpo_dsl.backends.hf import HFBackend
from tests.support.training import TEAM, varied_reward, write_team

STEPS = 2
DRAWS_PER_STEP = 4 * 4 * 3  # batch 4 prompts x group 4 x (2 solvers + 1 aggregator)


class SeedLog(HFBackend):
    """The real hf engine, noting the seed of every request it is sent."""

    SEEDS: ClassVar[list[int | None]] = []

    def generate(self, requests, *, seed=None):
        self.SEEDS.extend(r.seed for r in requests)
        return super().generate(requests, seed=seed)


@pytest.mark.slow
def test_no_two_draws_of_a_training_step_share_a_seed(models, tmp_path, monkeypatch):
    """TEAM: two policies (two backend calls per round), a pool of two solvers, G = 4. Each step's draws
    have distinct seeds, no seed recurs anywhere in the run (rollouts and held-out evaluations), and the
    step rolled out as two ranks' halves draws with exactly the seeds of the one-rank rollout."""
    from srpo_dsl.rl.engines import policies
    from srpo_dsl.rl.loop import trainer
    from srpo_dsl.rl.loop.plan import plan_file

    monkeypatch.setattr(policies, "HFBackend", SeedLog)
    SeedLog.SEEDS = []
    steps: dict[int, list[int | None]] = {}
    split: dict[int, list[int | None]] = {}
    rollout = trainer.rollout

    def recorded(run, step):
        start = len(SeedLog.SEEDS)
        episodes = rollout(run, step)
        steps[step] = SeedLog.SEEDS[start:]
        for rank in (0, 1):  # the same step as the ranks of a two-process run would roll it out
            rank_run = dataclasses.replace(run, dist=dataclasses.replace(run.dist, rank=rank, world_size=2))
            rollout(rank_run, step)
        split[step] = SeedLog.SEEDS[start + len(steps[step]) :]
        del SeedLog.SEEDS[start + len(steps[step]) :]  # the run's own draws only
        return episodes

    monkeypatch.setattr(trainer, "rollout", recorded)
    varied_reward()
    trainer.train(
        plan_file(
            write_team(tmp_path / "wf", TEAM),
            tmp_path / "run",
            {"steps": STEPS, "eval_every": STEPS, "save_every": 100},
            models={"a": str(models[0]), "b": str(models[1])},
            device="cpu",
        ),
        progress=False,
    )
    assert sorted(steps) == [1, 2]
    for step, seeds in steps.items():
        assert len(seeds) == DRAWS_PER_STEP and None not in seeds
        assert len(set(seeds)) == len(seeds), step
        assert sorted(split[step]) == sorted(seeds), step
    evaluations = 2 * 4 * 2 * 3  # steps 0 and 2: eval_size 4 prompts x eval_k 2 x 3 members
    assert len(SeedLog.SEEDS) == STEPS * DRAWS_PER_STEP + evaluations
    assert len(set(SeedLog.SEEDS)) == len(SeedLog.SEEDS)
