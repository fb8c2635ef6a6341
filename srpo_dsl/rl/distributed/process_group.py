"""This process's place in the data-parallel group, and the group's collectives.

One process runs without a launcher (`init_distributed` fills in the rendezvous variables);
under `deepspeed`/`torchrun` the launcher's variables are used (gloo on CPU, nccl on GPU).
"""

from __future__ import annotations

import atexit
import gc
import os
import socket
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TypeVar, cast

import torch

from srpo_dsl.launched import LAUNCH_VARIABLES
from srpo_dsl.rl.distributed.ds_import import import_deepspeed
from srpo_dsl.rl.distributed.network import launcher_store_reachable, reaching_peers, use_route_to_master

T = TypeVar("T")
SHM_OP = "deepspeed_shm_comm"  # DeepSpeed's ShareMemCommBuilder's op, never built (see init_distributed)


@dataclass(frozen=True)
class Dist:
    """This process's place in the data-parallel group."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device


def all_reduce(values: Sequence[float], device: torch.device) -> list[float]:
    """Element-wise sum over ranks (the values themselves with one process)."""
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(t)
    return t.tolist()


def all_gather(value: T) -> list[T]:
    """Every rank's `value` (picklable), in rank order (`[value]` with one process)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return [value]
    out: list[object] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, value)
    return cast(list[T], out)  # unpickled: every rank's `value`, of the type this rank's has


def barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device: str, trainers: int | None = None) -> Dist:
    """Join (or, alone, create) the process group, destroyed at exit (`destroy_distributed`); call before
    anything imports deepspeed. Under a launcher the group rendezvouses on the launch's store
    (`launch_store`), and with rollout workers it is the `trainers` first ranks only; alone, the group of
    one rendezvouses on an in-memory store."""
    if device == "cpu":
        os.environ["DS_ACCELERATOR"] = "cpu"
    if "RANK" in os.environ:
        store = launch_store()
    else:  # no launcher: a group of one, on a store in this process (no port to bind, none another
        alone = ("0", "0", "1", "127.0.0.1", str(free_port()))  # process can take first)
        os.environ.update(zip(LAUNCH_VARIABLES, alone))
        store, trainers = torch.distributed.HashStore(), 1
    trainers = int(os.environ["WORLD_SIZE"]) if trainers is None else trainers
    os.environ["WORLD_SIZE"] = str(trainers)  # what DeepSpeed reads of the launch: the trainers' group
    use_route_to_master()  # gloo's interface to the other nodes
    deepspeed = import_deepspeed()

    # DeepSpeed's CPU backend compiles its shared-memory op on creation (about 60 s the first time), but
    # only its inference all-reduce (tensor-parallel serving) uses it: ZeRO's collectives go through
    # torch.distributed (gloo here), so the op is marked unbuildable and never compiled
    deepspeed.ops.__compatible_ops__[SHM_OP] = False

    warnings.filterwarnings(
        "ignore", category=FutureWarning, module="torch.distributed"
    )  # from ZeRO's internals
    backend = "gloo" if device == "cpu" else "nccl"
    if not torch.distributed.is_initialized():
        with reaching_peers():
            group_store = torch.distributed.PrefixStore("srpo-trainers", store)
            rank = int(os.environ["RANK"])
            torch.distributed.init_process_group(backend, store=group_store, rank=rank, world_size=trainers)
            deepspeed.init_distributed(dist_backend=backend, verbose=False)
        atexit.register(destroy_distributed)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    return Dist(
        torch.distributed.get_rank(),
        local_rank,
        torch.distributed.get_world_size(),
        rank_device(device, local_rank),
    )


@cache
def launch_store() -> torch.distributed.Store:
    """The rendezvous store of this process's launch (torchrun's agent's, or the one rank 0 hosts at
    MASTER_PORT under `deepspeed` and srpo-dsl's own launch), joined once: the plan's hand-over
    (`rl.loop.plan_io`), the rollout link, the trainers' group and the dry run's all live on it, as a
    second store of rank 0's would find its port taken. A store that went away is a ConnectionError
    within `network.AGENT_STORE_S`."""
    use_route_to_master()  # gloo's interface to the other nodes
    with reaching_peers():
        launcher_store_reachable()
        store, _, _ = next(torch.distributed.rendezvous("env://"))
    return store


def rank_device(device: str, local_rank: int) -> torch.device:
    """A trainer rank's device: the GPU of its local rank (one per GPU), or the CPU."""
    return torch.device("cuda", local_rank) if device == "cuda" else torch.device("cpu")


def destroy_distributed() -> None:
    """Destroy the process groups `init_distributed` created, at exit while the interpreter is whole.

    A gloo group's worker thread may still hold a finished collective (its tensors, a completion
    callback) after its caller has moved on; left to interpreter finalization, that thread takes the
    GIL, is ended mid-destructor, and the process aborts ("terminate called without an active
    exception"). Destroying the groups (DeepSpeed's references too) and collecting the objects that
    still hold one (engines are reference cycles) joins those threads first."""
    if torch.distributed.is_initialized():
        import_deepspeed().comm.destroy_process_group()
    gc.collect()
