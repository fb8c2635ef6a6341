"""New weights from the trainer to the rollout workers (`link.py`, `schedule.py`).

Every trainer rank takes part in building a version (gathered under ZeRO-3); trainer rank 0
keeps the newest one and sends it to the workers that need it: a header naming the parameters
(a LoRA model's weights folded into the base model's names for `vllm`, as `push_weights` does
in-process), then one flat tensor per engine. A worker's rollout engine loads a version right
before a generation call (`fresh.py`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

from srpo_dsl.backends.base import RolloutEngine
from srpo_dsl.rl.engines.policies import TrainingPolicy, engine_owners
from srpo_dsl.rl.engines.weight_sync import rollout_weights
from srpo_dsl.rl.transport.link import CONTROL, FLAT, Link, flatten, unflatten


@dataclass(frozen=True)
class Header:
    """What a version's tensors are: per engine, the parameters' names and shapes, the flat tensor's dtype
    and size."""

    version: int
    names: Mapping[str, list[str]]
    shapes: Mapping[str, list[tuple[int, ...]]]
    dtypes: Mapping[str, str]
    sizes: Mapping[str, int]


@dataclass(frozen=True)
class Weights:
    """One version of every trained engine: its header and one flat tensor per engine."""

    header: Header
    flats: Mapping[str, torch.Tensor]

    @property
    def version(self) -> int:
        return self.header.version

    def pairs(self, engine: str) -> Iterator[tuple[str, torch.Tensor]]:
        return zip(self.header.names[engine], unflatten(self.flats[engine], self.header.shapes[engine]))


def trained_weights(policy: TrainingPolicy) -> list[tuple[str, torch.Tensor]]:
    """(name, full tensor) of what the update changes: the trained parameters, or for an engine that takes
    merged weights every base weight with the LoRA deltas folded in (gathered under ZeRO-3: collective)."""
    merged = policy.backend.merged_weights and hasattr(policy.module, "peft_config")
    trained = {n for n, p in policy.module.named_parameters() if p.requires_grad}
    return [
        (name, tensor.detach().clone())
        for name, tensor in rollout_weights(policy.module, policy.backend.merged_weights)
        if merged or name in trained
    ]


def build_weights(policies: Mapping[str, TrainingPolicy], version: int, device: torch.device) -> Weights:
    """The trained engines' weights as `version` (every trainer rank: a collective under ZeRO-3)."""
    names, shapes, flats = {}, {}, {}
    for owner, policy in sorted(engine_owners(policies).items()):
        pairs = trained_weights(policy)
        names[owner] = [n for n, _ in pairs]
        shapes[owner] = [tuple(t.shape) for _, t in pairs]
        flats[owner] = flatten([t for _, t in pairs]).to(device)
    dtypes = {owner: str(flat.dtype).removeprefix("torch.") for owner, flat in flats.items()}
    sizes = {owner: flat.numel() for owner, flat in flats.items()}
    return Weights(Header(version, names, shapes, dtypes, sizes), flats)


def send_weights(link: Link, weights: Weights, worker: int) -> None:
    """Trainer rank 0 sends a version to `worker` on its control stream (returns at once)."""
    link.send_object(weights.header, worker, CONTROL)
    for i, owner in enumerate(sorted(weights.flats)):
        link.send_tensor(weights.flats[owner], worker, FLAT + i)


def recv_flats(link: Link, header: Header) -> Weights:
    """The tensors that follow `header` on the control stream from trainer rank 0 (blocks)."""
    flats = {}
    for i, owner in enumerate(sorted(header.sizes)):
        flat = torch.empty(
            header.sizes[owner], dtype=getattr(torch, header.dtypes[owner]), device=link.device
        )
        flats[owner] = link.recv_tensor(flat, 0, FLAT + i)
    return Weights(header, flats)


def load_engine(engine: RolloutEngine, weights: Weights, owner: str) -> None:
    """`engine` (the one of trained engine `owner`) loads its weights of `weights`; its policy version
    becomes `weights.version`."""
    engine.load_weights(weights.pairs(owner))
    engine.version = weights.version
