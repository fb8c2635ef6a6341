"""The trainer's side of asynchronous rollouts: a step's batch from its worker, the new weights back.

    episodes, metrics = feed.batch(step)    # wait for the step's batch; drop episodes over the bound
    ... update ...
    feed.publish(policies, step)            # version `step` to every worker (none after the last step)

The metrics of a step, under `async/`: the staleness of its kept episodes (mean, max), the
episodes dropped, and the seconds the worker and the trainer waited for each other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

from srpo_dsl.lang.schema import TrainOptions
from srpo_dsl.rl.policies import Policy
from srpo_dsl.rl.process_group import all_reduce
from srpo_dsl.rl.remote_weights import send_weights
from srpo_dsl.rl.rollout_link import EPISODES, SETUP, Batch, Link, LinkError
from srpo_dsl.rl.staleness import within_bound
from srpo_dsl.runtime.episode import Episode

PREFIX = "async/"


class Feed:
    """The trainer rank's end of the link to the rollout workers."""

    def __init__(self, link: Link, opts: TrainOptions, policies: Mapping[str, Policy], device: torch.device):
        self.link, self.opts, self.device = link, opts, device
        self.trained = {name for name, p in policies.items() if p.engine is not None}

    def batch(self, step: int) -> tuple[list[Episode], dict[str, float]]:
        """This rank's share of `step`'s batch, within the staleness bound, and its metrics."""
        clock = time.perf_counter()
        worker = self.link.layout.worker_of(step)
        batch: Batch = self.link.recv_object(worker, EPISODES)
        waited = time.perf_counter() - clock
        if batch.step != step:
            raise LinkError(f"{self.link.describe(worker)} sent step {batch.step}'s batch for step {step}")
        fresh = within_bound(batch.episodes, step - 1, self.opts.max_staleness, self.trained)
        metrics = fresh.metrics() | {"worker_idle": batch.idle, "trainer_idle": waited}
        metrics["dropped_episodes"] = all_reduce([fresh.dropped], self.device)[0]  # over the trainer ranks
        return fresh.episodes, {PREFIX + k: v for k, v in metrics.items()}

    def begin(self, policies: Mapping[str, Policy], version: int) -> None:
        """Before the first step: the workers get the weights they start from (`version`: the steps done)."""
        send_weights(self.link, policies, version)

    def publish(self, policies: Mapping[str, Policy], version: int) -> None:
        """After the optimizer step that made `version`: the workers get the weights, unless no batch is
        left to generate (collective over the trainer ranks under ZeRO-3)."""
        if version < self.opts.steps:
            send_weights(self.link, policies, version)

    def close(self) -> None:
        """Wait until the workers have received everything sent."""
        self.link.flush()


def send_setup(link: Link, paths: Mapping[str, str]) -> None:
    """Trainer rank 0 tells every worker each policy's model, as the trainer resolved it."""
    if link.layout.rank == 0:
        for worker in range(link.layout.trainers, link.layout.world):
            link.send_object(dict(paths), worker, SETUP)
