"""New weights from the trainer to the rollout workers, after every optimizer step (`rollout_link.py`).

Trainer rank 0 sends each engine's trained parameters as one flat tensor, with a header naming
them (a LoRA model's weights folded into the base model's names for `vllm`, as `push_weights`
does in-process); under ZeRO-3 every trainer rank takes part in gathering them. A worker
receives on a thread of its own, so a message never waits for a generation to end, and its
rollout engines load the newest version between two batches.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from srpo_dsl.backends.base import RolloutEngine
from srpo_dsl.rl.policies import Policy, engine_owners
from srpo_dsl.rl.rollout_link import FLAT, WEIGHTS, Link, LinkError, flatten, unflatten
from srpo_dsl.rl.weight_sync import rollout_weights


@dataclass(frozen=True)
class Weights:
    """One version of every trained engine: per engine, parameter names and shapes, and a flat tensor."""

    version: int
    names: Mapping[str, list[str]]
    shapes: Mapping[str, list[tuple[int, ...]]]
    flats: Mapping[str, torch.Tensor]

    def pairs(self, engine: str) -> Iterator[tuple[str, torch.Tensor]]:
        return zip(self.names[engine], unflatten(self.flats[engine], self.shapes[engine]))


def trained_weights(policy: Policy) -> list[tuple[str, torch.Tensor]]:
    """(name, full tensor) of what the update changes: the trained parameters, or for an engine that takes
    merged weights every base weight with the LoRA deltas folded in (gathered under ZeRO-3: collective)."""
    merged = policy.backend.merged_weights and hasattr(policy.module, "peft_config")
    trained = {n for n, p in policy.module.named_parameters() if p.requires_grad}
    return [
        (name, tensor.detach().clone())
        for name, tensor in rollout_weights(policy.module, policy.backend.merged_weights)
        if merged or name in trained
    ]


def send_weights(link: Link, policies: Mapping[str, Policy], version: int) -> None:
    """Every trainer rank gathers; rank 0 sends the weights of `version` to every worker (returns once the
    previous version was received: one version's buffers at a time)."""
    names, shapes, flats = {}, {}, {}
    for owner, policy in sorted(engine_owners(policies).items()):
        pairs = trained_weights(policy)
        names[owner] = [n for n, _ in pairs]
        shapes[owner] = [tuple(t.shape) for _, t in pairs]
        flats[owner] = flatten([t for _, t in pairs]).to(link.device)
    if link.layout.rank != 0:
        return
    link.flush()
    header = {"version": version, "names": names, "shapes": shapes}
    header["dtypes"] = {owner: str(flat.dtype).removeprefix("torch.") for owner, flat in flats.items()}
    header["sizes"] = {owner: flat.numel() for owner, flat in flats.items()}
    for worker in range(link.layout.trainers, link.layout.world):
        link.send_object(header, worker, WEIGHTS)
        for i, owner in enumerate(sorted(flats)):
            link.send_tensor(flats[owner], worker, FLAT + i)


def recv_weights(link: Link) -> Weights:
    """The next version trainer rank 0 sent (blocks)."""
    header = link.recv_object(0, WEIGHTS)
    flats = {}
    for i, owner in enumerate(sorted(header["sizes"])):
        dtype = getattr(torch, header["dtypes"][owner])
        flat = torch.empty(header["sizes"][owner], dtype=dtype, device=link.device)
        flats[owner] = link.recv_tensor(flat, 0, FLAT + i)
    return Weights(header["version"], header["names"], header["shapes"], flats)


def load_weights(engines: Mapping[str, RolloutEngine], weights: Weights) -> None:
    """Each trained engine's rollout engine loads its weights; every engine's policy version becomes
    `weights.version` (the trainer's optimizer steps)."""
    for owner in weights.flats:
        engines[owner].load_weights(weights.pairs(owner))
        engines[owner].version = weights.version


class Receiver(threading.Thread):
    """A worker's thread receiving every version up to `last`; the worker takes the newest one."""

    def __init__(self, link: Link, last: int):
        super().__init__(name="srpo-weights", daemon=True)
        self.link, self.last = link, last
        self.ready = threading.Condition()
        self.newest: Weights | None = None
        self.received = -1
        self.error: LinkError | None = None

    def run(self) -> None:
        try:
            while self.received < self.last:
                weights = recv_weights(self.link)
                with self.ready:
                    self.newest, self.received = weights, weights.version
                    self.ready.notify_all()
        except LinkError as exc:
            with self.ready:
                self.error = exc
                self.ready.notify_all()

    def take(self, at_least: int) -> Weights | None:
        """The newest version not yet taken, waiting until one of at least `at_least` has arrived (None:
        nothing newer than what was taken)."""
        with self.ready:
            self.ready.wait_for(lambda: self.received >= at_least or self.error is not None)
            if self.error is not None and self.received < at_least:
                raise self.error
            weights, self.newest = self.newest, None
            return weights
