"""`srpo-dsl train --launcher ray`: a run's trainer ranks and rollout workers as Ray actors on an existing
Ray cluster, with Ray's own machinery (placement groups, actors, generators) and torch's rendezvous.

`ray.init(address)` joins the cluster (`--ray-address`, else RAY_ADDRESS, else `auto`: the cluster this
node belongs to); the driver never starts one. The run gets one placement group, one bundle per process
({"CPU": cpus} and, on CUDA, {"GPU": 1}), strategy PACK: the bundles fill as few nodes as they fit on, as
torchrun fills a node's GPUs before the next (STRICT_SPREAD would give every process a node of its own,
STRICT_PACK would need all of them on one). One plain actor per bundle (`api.ray_rank`), global rank =
bundle index, so the last R ranks are the rollout workers. Rank 0's actor names its node's address and a
free port there: MASTER_ADDR and MASTER_PORT of the rendezvous store rank 0's process hosts, as under
torchrun; each process also gets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE (among the run's
processes on its node, in rank order), GROUP_RANK (its node, numbered in rank order), OMP_NUM_THREADS
(its bundle's CPUs) and, on GPUs, CUDA_VISIBLE_DEVICES: the GPUs Ray gave the run on that node, its own
at LOCAL_RANK, as torchrun's processes see a node's GPUs. Not Ray Train's TorchTrainer: its workers fail
as one group, and a rollout worker that dies must not stop the run. The driver prints every process's
output as it comes and returns trainer rank 0's exit code; a signal it gets (Ctrl-C) goes on to every
process, and its actors and placement group are removed when it returns.
"""

from __future__ import annotations

import codecs
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from types import ModuleType
from typing import IO, TYPE_CHECKING, TypeAlias

from srpo_dsl.devices import DEVICES
from srpo_dsl.errors import UsageError
from srpo_dsl.launched import ended_before_joining, role
from srpo_dsl.stopping import Handler

if TYPE_CHECKING:
    from ray import ObjectRefGenerator
    from ray.actor import ActorHandle
    from ray.util.placement_group import PlacementGroup

    from srpo_dsl.api.ray_rank import RankProcess
    from srpo_dsl.api.relay import Outputs
    from srpo_dsl.rl.loop.plan import RayLaunch, Setup, TrainPlan

Rank: TypeAlias = "ActorHandle[RankProcess]"  # one process's actor (`api.ray_rank`)
INSTALL = "pip install 'srpo-dsl[ray]'"
PROBE_SECONDS = 5.0  # for the head's port to answer (`ray.init` itself retries for minutes)
GRACE = 10.0  # seconds the workers get to stop once the trainer is done
WAITING = 30.0  # seconds before saying that the cluster has not got the bundles yet
NOT_RAY = {  # what a gRPC status of the probe says of the server (others: a Ray head, or one can't tell)
    "UNAVAILABLE": "it does not speak gRPC",
    "DEADLINE_EXCEEDED": f"no gRPC reply in {PROBE_SECONDS:g} s",
    "UNIMPLEMENTED": "a gRPC server without Ray's GCS service",
}


def default_address(given: str | None) -> str:
    """The cluster to join: the one given, else RAY_ADDRESS, else `auto` (the cluster of this node)."""
    return given or os.environ.get("RAY_ADDRESS") or "auto"


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise UsageError(f"--launcher ray needs Ray, an optional extra: {INSTALL}") from None
    return ray


def connect(address: str) -> ModuleType:
    """Join the Ray cluster at `address`, once per process (a later run uses the same cluster, as a
    notebook that called `ray.init` itself does); one line when there is none."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    probe(address)
    try:
        joined(ray, address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"--ray-address {address}: no Ray cluster to join ({first.rstrip('.')})") from None
    return ray


def joined(ray: ModuleType, address: str) -> None:
    """`ray.init(address)`, leaving SIGTERM's handler as it was: Ray sets its own (`sys.exit(15)` from
    its frame, which the CLI would report as a plugin's exit); a SIGTERM while it joins ends the process as
    SIGTERM does, exit 143, without a word."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except SystemExit as exc:
        if exc.code != signal.SIGTERM:
            raise
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        if before is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, before)


def probe(address: str) -> None:
    """A HOST:PORT whose port does not answer, or answers but not as a Ray cluster's head (a web server),
    is refused within seconds (`ray.init` would retry for minutes)."""
    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_SECONDS).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise UsageError(f"--ray-address {address}: no Ray cluster answers there ({why})") from None
    refused = not_ray(address)
    if refused is not None:
        raise UsageError(f"--ray-address {address}: it answers, but not as a Ray cluster's head ({refused})")


def not_ray(address: str) -> str | None:
    """Why what answers at `address` is not a Ray cluster's head (GCS), asked in one gRPC call of at most
    PROBE_SECONDS, or None (it is, or it cannot be told: TLS, a Ray without the call, credentials)."""
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:
        return None
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=PROBE_SECONDS)
        except grpc.RpcError as exc:
            return NOT_RAY.get(exc.code().name)
    return None


def on_cluster(setup: Setup) -> Setup:
    """`setup` with the device the run uses on the cluster: the one asked for, else `cuda` when the
    cluster has GPUs, else cpu. Joins the cluster (a run's processes check their own node's engine)."""
    ray_setup = setup.ray
    assert ray_setup is not None
    if setup.device is not None and setup.device not in DEVICES:
        raise UsageError(f"device {setup.device!r}: expected one of {', '.join(DEVICES)}")
    gpus = connect(ray_setup.address).cluster_resources().get("GPU", 0)
    if setup.device == "cuda" and not gpus:
        raise UsageError(
            f"--device cuda: the Ray cluster at {ray_setup.address} has no GPU (use --device cpu)"
        )
    return replace(setup, device=setup.device or ("cuda" if gpus else "cpu"))


def launch_env(
    places: Sequence[tuple[str, Sequence[str]]], master: tuple[str, int], cpus: int
) -> list[dict[str, str]]:
    """Each process's launch variables, from each rank's (node, GPUs Ray gave it), in rank order."""
    nodes = list(dict.fromkeys(node for node, _ in places))
    envs = []
    for rank, (node, _) in enumerate(places):
        local = [r for r, (n, _) in enumerate(places) if n == node]
        env = {"RANK": str(rank), "WORLD_SIZE": str(len(places)), "LOCAL_RANK": str(local.index(rank))}
        env |= {"LOCAL_WORLD_SIZE": str(len(local)), "GROUP_RANK": str(nodes.index(node))}
        env |= {"MASTER_ADDR": master[0], "MASTER_PORT": str(master[1]), "OMP_NUM_THREADS": str(cpus)}
        if gpus := [g for r in local for g in places[r][1]]:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        envs.append(env)
    return envs


def run_on_ray(plan: TrainPlan, argv: Sequence[str], outputs: Outputs) -> int:
    """Run `srpo-dsl ARGV` as the plan's processes, one Ray actor each; trainer rank 0's exit code."""
    assert plan.setup.ray is not None
    launch, gpus = plan.setup.ray, int(plan.device == "cuda")
    ray = connect(launch.address)
    from ray.util.placement_group import placement_group, remove_placement_group

    bundles = [{"CPU": launch.cpus, "GPU": gpus} if gpus else {"CPU": launch.cpus}] * plan.processes
    group = placement_group(bundles, strategy="PACK")
    actors: list[Rank] = []
    try:
        reserved(ray, group, bundles, outputs.stderr or sys.stderr)
        actors = started_actors(ray, group, launch, gpus, plan.processes)
        trainers = plan.processes - plan.opts.rollout_workers
        return followed(ray, actors, trainers, list(argv), launch, outputs)
    finally:
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)


def reserved(ray: ModuleType, group: PlacementGroup, bundles: list[dict[str, int]], err: IO[str]) -> None:
    """Wait until the cluster holds the run's bundles, saying so once when it takes long."""
    ready, _ = ray.wait([group.ready()], timeout=WAITING)
    if not ready:
        each = ", ".join(f"{v} {k}" for k, v in bundles[0].items())
        err.write(f"waiting for the Ray cluster to hold {len(bundles)} processes of {each} each\n")
        err.flush()
        ray.get(group.ready())


def started_actors(
    ray: ModuleType, group: PlacementGroup, launch: RayLaunch, gpus: int, processes: int
) -> list[Rank]:
    """One actor per bundle, in rank order."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from srpo_dsl.api.ray_rank import RankProcess

    actor = ray.remote(RankProcess)
    return [
        actor.options(
            num_cpus=launch.cpus,
            num_gpus=gpus,
            max_concurrency=3,  # `run` streams while `signal` and `joined` may come
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
        ).remote()
        for rank in range(processes)
    ]


def followed(
    ray: ModuleType, actors: list[Rank], trainers: int, argv: list[str], launch: RayLaunch, outputs: Outputs
) -> int:
    """Start every process, print what each writes, pass signals on; trainer rank 0's exit code."""
    places = ray.get([a.place.remote() for a in actors])
    master = (places[0][1], ray.get(actors[0].free_port.remote()))
    envs = [e | outputs.env() for e in launch_env([(n, gpus) for n, _, gpus in places], master, launch.cpus)]
    streams = {rank: a.run.remote(argv, env, os.getcwd()) for rank, (a, env) in enumerate(zip(actors, envs))}
    out, err = outputs.stdout or sys.stdout, outputs.stderr or sys.stderr  # text: a notebook's have no bytes
    out.flush()
    with forwarded_signals() as received:
        return Follow(ray, actors, trainers, streams, out, err, received).until_done()


class Follow:
    """The driver's loop over its actors' streams."""

    def __init__(
        self,
        ray: ModuleType,
        actors: list[Rank],
        trainers: int,
        streams: dict[int, ObjectRefGenerator],
        out: IO[str],
        err: IO[str],
        received: list[int],
    ):
        self.ray, self.actors, self.trainers, self.streams = ray, actors, trainers, streams
        self.out, self.err, self.received = out, err, received
        self.codes: dict[int, int] = {}
        self.early: int | None = None  # the code of a worker that ended before the launch was joined
        self.decoders: dict[
            tuple[int, str], codecs.IncrementalDecoder
        ] = {}  # a chunk may end inside a character
        self.stopping = False

    def until_done(self) -> int:
        """Until trainer rank 0 is done and its workers have stopped (or had GRACE seconds to)."""
        deadline = None
        while self.streams and (deadline is None or time.monotonic() < deadline):
            for number in self.received:
                self.signal_all(number)
            self.received.clear()
            ready, _ = self.ray.wait(list(self.streams.values()), num_returns=1, timeout=0.5)
            for stream in ready:
                self.take(next(rank for rank, s in self.streams.items() if s is stream))
            if deadline is None and 0 not in self.streams:  # trainer rank 0 is done
                if self.codes.get(0) != 0:  # it said why: its workers need not add that it is gone
                    self.signal_all(signal.SIGTERM)
                deadline = time.monotonic() + GRACE
        return self.early if self.early is not None else self.codes.get(0, 1)

    def take(self, rank: int) -> None:
        """The next item of rank `rank`'s stream: output, its exit code, or the end of its actor."""
        try:
            kind, value = self.ray.get(next(self.streams[rank]))
        except StopIteration:
            del self.streams[rank]
            return
        except self.ray.exceptions.RayActorError as exc:
            del self.streams[rank]
            self.lost(rank, exc)
            return
        if kind == "exit":
            self.codes[rank] = value
            if rank >= self.trainers and value != 0 and not self.stopping and not self.joined():
                self.ended_early(rank, value, f"{signal.Signals(value - 128).name}" if value > 128 else "")
            elif 0 < rank < self.trainers and value != 0 and not self.stopping:
                self.signal_all(signal.SIGTERM)  # a trainer rank that fails stops the run, as under torchrun
        else:
            decoder = self.decoders.setdefault((rank, kind), codecs.getincrementaldecoder("utf-8")("replace"))
            sink = self.out if kind == "out" else self.err
            sink.write(decoder.decode(value))
            sink.flush()

    def lost(self, rank: int, exc: Exception) -> None:
        """An actor that died: a worker's steps go to the others (its peers see it gone), unless the launch
        was not joined yet; a trainer rank's stops the run."""
        why = str(exc).splitlines()[0].rstrip(".") if str(exc) else type(exc).__name__
        if rank >= self.trainers and not self.stopping and not self.joined():
            self.ended_early(rank, 1, f"its Ray actor died: {why}")
            return
        level = "warning" if rank >= self.trainers else "error"
        self.err.write(f"{level}: the Ray actor of {role(rank, self.trainers)} died ({why})\n")
        self.err.flush()
        if rank < self.trainers and not self.stopping:
            self.signal_all(signal.SIGTERM)

    def joined(self) -> bool:
        """Trainer rank 0 joined the launch (then every process did); not when its actor is gone."""
        try:
            return bool(self.ray.get(self.actors[0].joined.remote(), timeout=30))
        except Exception:  # its actor died or hangs: the run stops anyway
            return False

    def ended_early(self, rank: int, code: int, why: str) -> None:
        """A worker ended before the launch was joined (the others would wait for it at the rendezvous for
        half an hour): the run stops with its code; one line when it said nothing (`why`: a signal)."""
        if why:
            self.err.write(ended_before_joining(rank, self.trainers, why) + "\n")
            self.err.flush()
        self.early = code or 1
        self.signal_all(signal.SIGTERM)

    def signal_all(self, number: int) -> None:
        self.stopping = self.stopping or number != signal.SIGINT
        for rank in self.streams:
            self.actors[rank].signal.remote(int(number))


class forwarded_signals:
    """The SIGINT and SIGTERM this process gets while following, recorded for the loop to pass on (in the
    main thread only: elsewhere Python delivers none)."""

    def __enter__(self) -> list[int]:
        self.received: list[int] = []
        self.previous: dict[int, Handler] = {}
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self.previous[number] = signal.signal(number, lambda n, _: self.received.append(n))
        return self.received

    def __exit__(self, *_: object) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
