"""`srpo-dsl train --dry-run`: each process of the launch, its role, node and device, before anything loads.

Under a launcher (`torchrun`, `deepspeed`: RANK and WORLD_SIZE set) every process joins one gloo group
on the launch's rendezvous store (`launch_store`), which also proves that the nodes reach each other; rank 0
gathers every rank's place and prints one line per rank. Without a launcher it prints the processes
this command would start (`TrainPlan.processes`: one, or 1 + R with `rollout_workers = R`) and
starts none.
Roles and devices come from the rules the run uses (`rl.transport.link.LaunchLayout`, `link_device`;
`rl.distributed.process_group.rank_device`); no model, DeepSpeed or user code is loaded.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from srpo_dsl.rl.loop.plan import TrainPlan

TIMEOUT = datetime.timedelta(minutes=5)  # for every rank to join, and for each connection


@dataclass(frozen=True)
class Place:
    """One process of a launch: what it does, where it runs, on which device."""

    rank: int
    world: int
    role: str  # `trainer rank N` or `rollout worker N`
    node: str  # `node N (HOST, ADDRESS)`: the launcher's node rank, the host, the address it is reached at
    device: str


def place(rank: int, local_rank: int, world: int, workers: int, device: str, node: str) -> Place:
    """Rank `rank` of `world` with `workers` rollout workers, as the run lays it out."""
    from srpo_dsl.rl.distributed.process_group import rank_device
    from srpo_dsl.rl.transport.link import LaunchLayout, link_device

    layout = LaunchLayout.of(rank, world, workers)
    if layout.is_worker:
        role, used = f"rollout worker {rank - layout.trainers}", link_device(device, local_rank)
    else:
        role, used = f"trainer rank {rank}", rank_device(device, local_rank)
    return Place(rank, world, role, node, str(used))


def this_node() -> str:
    """`node N (HOST, ADDRESS)`: the launcher's node rank (torchrun's GROUP_RANK, DeepSpeed's CROSS_RANK;
    left out when neither is set), the hostname, the address this process reaches MASTER_ADDR from, and
    gloo's interface when one is named (GLOO_SOCKET_IFNAME: the user's, or the choice of
    `rl.distributed.network`)."""
    from srpo_dsl.rl.distributed.network import source_address, use_route_to_master

    interface, master = use_route_to_master(), os.environ.get("MASTER_ADDR")
    address = source_address(master, int(os.environ.get("MASTER_PORT", 29500))) if master else None
    where = ", ".join(filter(None, [socket.gethostname(), address, interface and f"gloo on {interface}"]))
    number = os.environ.get("GROUP_RANK", os.environ.get("CROSS_RANK"))
    return f"node {number} ({where})" if number is not None else f"({where})"


def launched_places(workers: int, device: str) -> list[Place] | None:
    """Every rank's place, gathered over one gloo group on the launcher's rendezvous; rank 0 gets them
    (the others: None). ConnectionError when the ranks cannot connect."""
    import torch.distributed as dist

    from srpo_dsl.rl.distributed.network import reaching_peers
    from srpo_dsl.rl.distributed.process_group import launch_store

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    mine = place(rank, int(os.environ.get("LOCAL_RANK", 0)), world, workers, device, this_node())
    gathered: list[Place | None] = [None] * world
    store = dist.PrefixStore("srpo-dry-run", launch_store())
    with reaching_peers():
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=TIMEOUT)
        try:
            dist.all_gather_object(gathered, mine)
        finally:
            dist.destroy_process_group()
    return [p for p in gathered if p is not None] if rank == 0 else None  # (all_gather filled every one)


def planned_places(plan: TrainPlan) -> list[Place]:
    """The processes this command starts without a launcher, on this machine; none is started."""
    world, workers = plan.processes or 1, plan.opts.rollout_workers
    node = f"this machine ({socket.gethostname()})"
    return [place(r, r, world, workers, plan.device, node) for r in range(world)]


def dry_run(plan: TrainPlan) -> str | None:
    """The table of the launch's processes (None on ranks other than 0, which print nothing)."""
    if "RANK" not in os.environ:
        return table(planned_places(plan), launched=False)
    places = launched_places(plan.opts.rollout_workers, plan.device)
    return table(places, launched=True) if places is not None else None


def table(places: list[Place], launched: bool) -> str:
    """A summary line, then one line per rank: `rank 1/2  rollout worker 0  node 1 (...)  cpu`."""
    trainers = sum(p.role.startswith("trainer") for p in places)
    workers = len(places) - trainers
    kinds = f"{trainers} trainer rank{'s' * (trainers != 1)}"
    kinds += f", {workers} rollout worker{'s' * (workers != 1)}" if workers else ""
    processes = f"{len(places)} process{'es' * (len(places) != 1)}"
    if launched:
        nodes = len({p.node for p in places})
        head = f"{processes} on {nodes} node{'s' * (nodes != 1)} ({kinds}), connected: every rank joined"
        head += " one gloo group with the others"
    else:
        head = f"without a launcher this command runs {processes} on this machine ({kinds}); none was started"
    ranks = [f"rank {p.rank}/{p.world}" for p in places]
    width = [max(map(len, column)) for column in (ranks, [p.role for p in places])]
    rows = [f"{r:<{width[0]}}  {p.role:<{width[1]}}  {p.node}  {p.device}" for r, p in zip(ranks, places)]
    return "\n".join([f"dry run: {head}", *rows])


def launch_table(plan: TrainPlan, verbose: bool = False) -> str | None:
    """`dry_run`, its failures one line each as training's (`api.training.training_errors`)."""
    from srpo_dsl.api.quiet import libraries_quiet
    from srpo_dsl.api.training import training_errors

    with libraries_quiet(not verbose), training_errors(plan.workflow.path):
        return dry_run(plan)
