"""The trainer ranks and the rollout workers of one launch, and the process groups between them.

One launcher (`torchrun`, `deepspeed`, or `srpo-dsl train` launching itself) starts WORLD_SIZE
processes. With `rollout_workers = R`, global ranks 0..T-1 train (T = WORLD_SIZE - R) and ranks
T..T+R-1 generate. The trainers form the default process group among themselves, so DeepSpeed
and every collective of the trainer see only them; all ranks share the `link` groups, built on
the launcher's own rendezvous store (torch.distributed, no protocol of ours):

    setup     trainer rank 0 -> every worker, each policy's model            gloo
    control   trainer rank 0 -> a worker: Orders, a version's weights, Stop   gloo; the weights' tensors
                                                                              NCCL on GPU (a pair per worker)
    episodes  worker -> each trainer rank, its share of a step's prompts     gloo

An object is pickled (a size, then the bytes); weights are an object naming them and one flat
tensor per engine. Messages between two ranks arrive in the order they were sent (one tag per kind).
A peer that dies closes its connections: whoever waits on it gets a `LinkError` naming it.
"""

from __future__ import annotations

import atexit
import datetime
import os
import pickle
import re
import threading
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from srpo_dsl.launched import mark_joined, role
from srpo_dsl.rl.distributed.network import reaching_peers
from srpo_dsl.rl.distributed.process_group import launch_store
from srpo_dsl.runtime.episode import Episode

if TYPE_CHECKING:  # a CPU build of torch has no NCCL to name at run time
    from typing import TypeAlias

    Group: TypeAlias = dist.ProcessGroupGloo | dist.ProcessGroupNCCL  # every rank's gloo, or an NCCL pair

SETUP, EPISODES, CONTROL, FLAT = 10, 20, 30, 40  # the tags of the kinds of message (an object: tag, tag + 1)
TIMEOUT = datetime.timedelta(hours=2)  # a generation or an update may take long; a dead peer fails at once
HANG_UP, HANG_UP_WAIT = 99, datetime.timedelta(milliseconds=1)  # nobody sends it: `close`'s receive times out


@dataclass(frozen=True)
class RolloutBatch:
    """What a worker sends a trainer rank for one step: its share of the episodes, the version they
    were generated with, and the seconds the worker waited since its previous batch."""

    step: int
    version: int
    idle: float
    episodes: list[Episode]


@dataclass(frozen=True)
class Orders:
    """Trainer rank 0 to a worker: generate these steps, each with weights of at least its version."""

    steps: list[tuple[int, int]]


@dataclass(frozen=True)
class Stop:
    """Trainer rank 0 to a worker: the run is over."""


class LinkError(ConnectionError):
    """A rollout worker or a trainer rank went away (its process died or its connection closed)."""


@dataclass(frozen=True)
class LaunchLayout:
    """This process's place in a launch of `trainers` trainer ranks and `workers` rollout workers."""

    rank: int  # global
    trainers: int
    workers: int

    @classmethod
    def from_env(cls, workers: int) -> LaunchLayout:
        """From the launcher's RANK and WORLD_SIZE; ValueError when no rank is left to train."""
        return cls.of(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), workers)

    @classmethod
    def of(cls, rank: int, world: int, workers: int) -> LaunchLayout:
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
    """The process groups of a launch with rollout workers. Sends return at once and keep their buffers
    until waited on (`flush`); any thread may send (one object's two parts are never interleaved)."""

    def __init__(self, layout: LaunchLayout, store: dist.Store, device: torch.device):
        self.layout, self.device, self.store = layout, device, store
        objects = dist.PrefixStore("srpo-link", store)
        self.objects = dist.ProcessGroupGloo(objects, layout.rank, layout.world, TIMEOUT)
        self.pairs = weight_pairs(layout, store) if device.type == "cuda" else {}
        self.lock = threading.Lock()
        self.pending: dict[int, list[tuple[dist.Work, torch.Tensor]]] = {}  # peer -> (work, buffer) of sends
        # not waited on
        self.readers: list[threading.Thread] = []  # threads that receive on the link, joined at `close`
        self.closed = False

    def send_object(self, obj: object, dst: int, tag: int) -> None:
        """Pickle `obj` to rank `dst` (returns at once; `flush` waits)."""
        data = torch.frombuffer(
            bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8
        )
        size = torch.tensor([data.numel()], dtype=torch.int64)
        with self.lock:
            for tensor, t in ((size, tag), (data, tag + 1)):
                self.pending.setdefault(dst, []).append(
                    (self._send(self.objects, tensor, dst, t, dst), tensor)
                )

    def recv_object(self, src: int, tag: int) -> object:
        """The next object rank `src` sent with `tag` (blocks)."""
        size = torch.zeros(1, dtype=torch.int64)
        self._wait(self.objects.recv([size], src, tag), src)
        data = torch.empty(int(size.item()), dtype=torch.uint8)
        self._wait(self.objects.recv([data], src, tag + 1), src)
        return pickle.loads(data.numpy().tobytes())

    def send_tensor(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        group, peer = self._tensor_group(dst)
        with self.lock:
            self.pending.setdefault(dst, []).append((self._send(group, tensor, peer, tag, dst), tensor))

    def recv_tensor(self, tensor: torch.Tensor, src: int, tag: int) -> torch.Tensor:
        group, peer = self._tensor_group(src)
        self._wait(group.recv([tensor], peer, tag), src)
        return tensor

    def flush(self, peers: Sequence[int] | None = None) -> None:
        """Wait until every send so far to `peers` (default: every peer) was taken; a LinkError names
        the first peer that went away."""
        for peer in list(self.pending) if peers is None else peers:
            with self.lock:
                sent = self.pending.pop(peer, [])
            for work, _ in sent:
                self._wait(work, peer)

    def forget(self, peer: int) -> None:
        """Drop what was sent to `peer` and not taken (it went away)."""
        with self.lock:
            self.pending.pop(peer, None)

    def read(self, thread: threading.Thread) -> None:
        """Start `thread`, which receives on the link: `close` wakes it (a LinkError) and waits for it."""
        self.readers.append(thread)
        thread.start()

    def close(self) -> None:
        """Abort what is still pending, wake the threads blocked in a receive (a LinkError) and wait for
        them: a process that stops, on success or not, leaves no communication thread behind (one woken
        while the interpreter shuts down would abort it), and its peers see it go at once."""
        if self.closed:
            return
        self.closed = True
        for group in (self.objects, *self.pairs.values()):
            group.abort()  # NCCL's pairs: their receives fail; gloo's abort wakes no receive
        with self.lock:
            self.pending.clear()
        reading = [t for t in self.readers if t.is_alive() and t is not threading.current_thread()]
        if reading:
            self._hang_up()
        for thread in reading:
            thread.join(timeout=30)

    def _hang_up(self) -> None:
        """Close this process's gloo connections: a receive that times out closes its peer's connection,
        which fails every receive blocked on it (the peer sees 'Connection closed by peer' at once)."""
        for peer in range(self.layout.world):
            if peer != self.layout.rank:
                with suppress(RuntimeError):  # the time-out, or a connection closed already
                    self.objects.recv([torch.zeros(1, dtype=torch.uint8)], peer, HANG_UP).wait(HANG_UP_WAIT)

    def _tensor_group(self, peer: int) -> tuple[Group, int]:
        """The group a tensor to or from `peer` goes over, and `peer`'s rank in it: gloo's (every rank),
        or on CUDA the NCCL pair of trainer rank 0 and the worker (rank 0, then 1)."""
        if not self.pairs:
            return self.objects, peer
        worker = peer if peer >= self.layout.trainers else self.layout.rank
        return self.pairs[worker], int(peer != 0)

    def _send(self, group: Group, tensor: torch.Tensor, rank: int, tag: int, peer: int) -> dist.Work:
        """`group.send` to `rank` (global rank `peer`): a peer whose connection is already broken is a
        LinkError at once."""
        try:
            return group.send([tensor], rank, tag)
        except RuntimeError as exc:
            raise self._gone(peer, exc) from None

    def _wait(self, work: dist.Work, peer: int | None) -> None:
        try:
            work.wait()
        except RuntimeError as exc:
            raise self._gone(peer, exc) from None

    def _gone(self, peer: int | None, exc: RuntimeError) -> LinkError:
        who = "a peer" if peer is None else self.describe(peer)
        first = str(exc).splitlines()[0]
        reason = re.sub(r"^\[[^\]]*\]\s*", "", first).split(". ")[0]  # gloo's words, not its file
        return LinkError(f"{who} stopped ({reason.rstrip('.')})")

    def describe(self, rank: int) -> str:
        return role(rank, self.layout.trainers)


def weight_pairs(layout: LaunchLayout, store: dist.Store) -> dict[int, dist.ProcessGroupNCCL]:
    """On CUDA, one NCCL group per worker with trainer rank 0 (weights go GPU to GPU): a worker that
    dies breaks its own pair only. Trainer rank 0 holds every pair, a worker its own."""
    if layout.rank == 0:
        workers = range(layout.trainers, layout.world)
    else:
        workers = [layout.rank] if layout.is_worker else []
    return {
        w: dist.ProcessGroupNCCL(dist.PrefixStore(f"srpo-weights-{w}", store), int(w == layout.rank), 2)
        for w in workers
    }


def join_launch(workers: int, device: str) -> Link:
    """This process's link in a launch with `workers` rollout workers (before `init_distributed`, which
    then groups the trainer ranks on the same store); ValueError without a launcher."""
    if "RANK" not in os.environ:
        raise ValueError(
            f"rollout_workers = {workers} runs {workers + 1} processes: start them with `srpo-dsl train` "
            f"(it launches them), torchrun or deepspeed"
        )
    layout = LaunchLayout.from_env(workers)
    store = launch_store()
    with reaching_peers():
        link = Link(layout, store, link_device(device, int(os.environ.get("LOCAL_RANK", 0))))
    atexit.register(link.close)
    mark_joined()  # every process is connected: a worker may now go without stopping the launch
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
