"""The trainer ranks and the rollout workers of one launch, and the process groups between them.

One launcher (`torchrun`, `deepspeed`, or `srpo-dsl train` launching itself) starts WORLD_SIZE
processes. With `rollout_workers = R`, global ranks 0..T-1 train (T = WORLD_SIZE - R) and ranks
T..T+R-1 generate. The trainers form the default process group among themselves, so DeepSpeed
and every collective of the trainer see only them; all ranks share the `link` groups, built on
the launcher's own rendezvous store (torch.distributed, no protocol of ours):

    episodes  worker -> each trainer rank, its share of a step's prompts     gloo
    weights   trainer rank 0 -> every worker, after each optimizer step      gloo on CPU, NCCL on GPU

A message is a pickled header (a size, then the bytes) and, for weights, one flat tensor per
engine. Messages between two ranks arrive in the order they were sent (one tag per kind).
"""

from __future__ import annotations

import atexit
import datetime
import os
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from srpo_dsl.rl.network import reaching_peers, use_route_to_master
from srpo_dsl.runtime.episode import Episode

SETUP, EPISODES, WEIGHTS, FLAT = 10, 20, 30, 40  # the tags of the kinds of message (an object: tag, tag + 1)
TIMEOUT = datetime.timedelta(hours=2)  # a generation or an update may take long; a dead peer fails at once


@dataclass(frozen=True)
class Batch:
    """What a worker sends a trainer rank for one step: its share of the episodes, the version they
    were generated with, and the seconds the worker waited since its previous batch."""

    step: int
    version: int
    idle: float
    episodes: list[Episode]


class LinkError(ConnectionError):
    """A rollout worker or a trainer rank went away (its process died or its connection closed)."""


@dataclass(frozen=True)
class Layout:
    """This process's place in a launch of `trainers` trainer ranks and `workers` rollout workers."""

    rank: int  # global
    trainers: int
    workers: int

    @classmethod
    def from_env(cls, workers: int) -> Layout:
        """From the launcher's RANK and WORLD_SIZE; ValueError when no rank is left to train."""
        return cls.of(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), workers)

    @classmethod
    def of(cls, rank: int, world: int, workers: int) -> Layout:
        """Global rank `rank` of a launch of `world` processes, the last `workers` of them rollout workers
        (0: every rank trains); ValueError when no rank is left to train."""
        if world <= workers:
            raise ValueError(
                f"rollout_workers = {workers} needs at least {workers + 1} processes (one trainer), "
                f"the launcher started {world}"
            )
        return cls(rank, world - workers, workers)

    @property
    def world(self) -> int:
        return self.trainers + self.workers

    @property
    def is_worker(self) -> bool:
        return self.rank >= self.trainers

    def worker_of(self, step: int) -> int:
        """The global rank of the worker that generates `step`'s batch (round robin from step 1)."""
        return self.trainers + (step - 1) % self.workers

    def steps_of(self, rank: int, first: int, last: int) -> list[int]:
        """The steps in [first, last] whose batches worker `rank` generates."""
        return [t for t in range(first, last + 1) if self.worker_of(t) == rank]


class Link:
    """The process groups of a launch with rollout workers; sends keep their buffers until waited on."""

    def __init__(self, layout: Layout, store: Any, device: torch.device):
        self.layout, self.device, self.store = layout, device, store
        objects = dist.PrefixStore("srpo-link", store)
        self.objects = dist.ProcessGroupGloo(objects, layout.rank, layout.world, TIMEOUT)
        self.tensors = self.objects
        if device.type == "cuda":  # the weights go GPU to GPU
            tensors = dist.PrefixStore("srpo-link-nccl", store)
            self.tensors = dist.ProcessGroupNCCL(tensors, layout.rank, layout.world)
        self.pending: list[tuple[Any, Any]] = []  # (work, buffer) of sends not yet waited on

    def send_object(self, obj: object, dst: int, tag: int) -> None:
        """Pickle `obj` to rank `dst` (returns at once; `flush` waits)."""
        data = torch.frombuffer(
            bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8
        )
        size = torch.tensor([data.numel()], dtype=torch.int64)
        for tensor, t in ((size, tag), (data, tag + 1)):
            self.pending.append((self.objects.send([tensor], dst, t), tensor))

    def recv_object(self, src: int, tag: int) -> Any:
        """The next object rank `src` sent with `tag` (blocks)."""
        size = torch.zeros(1, dtype=torch.int64)
        self._wait(self.objects.recv([size], src, tag), src)
        data = torch.empty(int(size.item()), dtype=torch.uint8)
        self._wait(self.objects.recv([data], src, tag + 1), src)
        return pickle.loads(data.numpy().tobytes())

    def send_tensor(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        self.pending.append((self.tensors.send([tensor], dst, tag), tensor))

    def recv_tensor(self, tensor: torch.Tensor, src: int, tag: int) -> torch.Tensor:
        self._wait(self.tensors.recv([tensor], src, tag), src)
        return tensor

    def flush(self) -> None:
        """Wait until every send so far was received."""
        for work, _ in self.pending:
            self._wait(work, None)
        self.pending.clear()

    def close(self) -> None:
        """Abort what is still pending (a thread blocked in a receive gets a LinkError) and release the
        groups: a process that stops, on success or not, leaves no communication thread behind."""
        for group in {id(g): g for g in (self.objects, self.tensors)}.values():
            group.abort()
        self.pending.clear()

    def _wait(self, work: Any, peer: int | None) -> None:
        try:
            work.wait()
        except RuntimeError as exc:
            who = "a peer" if peer is None else self.describe(peer)
            first = str(exc).splitlines()[0]
            reason = re.sub(r"^\[[^\]]*\]\s*", "", first).split(". ")[0]  # gloo's words, not its file
            raise LinkError(f"{who} stopped ({reason.rstrip('.')})") from None

    def describe(self, rank: int) -> str:
        if rank >= self.layout.trainers:
            return f"rollout worker {rank - self.layout.trainers} (rank {rank})"
        return f"trainer rank {rank}"


def join_launch(workers: int, device: str) -> Link:
    """This process's link in a launch with `workers` rollout workers (before `init_distributed`, which
    then groups the trainer ranks on the same store); ValueError without a launcher."""
    if "RANK" not in os.environ:
        raise ValueError(
            f"rollout_workers = {workers} runs {workers + 1} processes: start them with `srpo-dsl train` "
            f"(it launches them), torchrun or deepspeed"
        )
    layout = Layout.from_env(workers)
    use_route_to_master()  # gloo's interface to the other nodes
    store, _, _ = next(dist.rendezvous("env://"))
    with reaching_peers():
        link = Link(layout, store, link_device(device, int(os.environ.get("LOCAL_RANK", 0))))
    atexit.register(link.close)
    return link


def link_device(device: str, local_rank: int) -> torch.device:
    """The device of a launch's process on the link, and a worker's for generating: its local rank wrapped
    around this node's GPUs (a worker past them shares one; 1 GPU: cuda:0); the CPU for `cpu`."""
    if device != "cuda":
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One contiguous 1-D tensor of `tensors` (their dtype: the first's)."""
    if not tensors:
        return torch.zeros(0)
    dtype = tensors[0].dtype
    return torch.cat([t.detach().reshape(-1).to(dtype) for t in tensors])


def unflatten(flat: torch.Tensor, shapes: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """The tensors `flatten` joined, as views of `flat`."""
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    return [part.view(tuple(s)) for part, s in zip(flat.split(sizes), shapes)]
