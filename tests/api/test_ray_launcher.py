"""`srpo-dsl train --launcher ray` (and `Workflow.train(launcher="ray")`) on a real Ray cluster the tests
start on this machine (`ray start --head` with 3 logical CPUs, one per process): the quickstart trained
synchronously (the API) and with a rollout worker at S = 0 (the CLI) through Ray equals the one-process
run bit for bit; a worker whose actor is killed hands its steps to the other, and with none left the
trainer checkpoints and stops with one line; Ctrl-C on the driver stops every actor's process; a cluster
that is not there, or a port that answers but is not Ray's, is one line; a SIGTERM while joining is exit 143. The cluster's processes are one process group of their own, ended by the
module (not `ray stop`, which would stop every Ray cluster of this machine)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

import srpo_dsl
from srpo_dsl.api.ray_launch import import_ray, launch_env, probe
from srpo_dsl.api.ray_rank import RankProcess
from srpo_dsl.errors import UsageError
from srpo_dsl.rl.distributed.process_group import free_port
from tests.support.clitools import ROOT, cli
from tests.support.compiles.count import compiling_processes, counting
from tests.support.runs import QUICKSTART, SMALL, env_threads, metrics, same_run, wait_for_steps

pytestmark = pytest.mark.distributed

pytest.importorskip("ray")

SAVE = ["--option", "save_every=3"]


@pytest.fixture(scope="module")
def compiles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where each process of the cluster (and a driver started with `counting`) notes a compile."""
    return tmp_path_factory.mktemp("compiles") / "pids"


@pytest.fixture(scope="module")
def cluster(compiles: Path) -> Iterator[str]:
    """The address of a one-node Ray cluster on loopback, its sockets under a short temporary folder; its
    processes count their compiles into `compiles`."""
    temp = Path(tempfile.mkdtemp(prefix="srpo-ray-", dir="/tmp"))  # Ray's socket paths have a length limit
    port = free_port()
    ports = [f"--{name}-port={free_port()}" for name in ("dashboard", "ray-client-server")]
    command = [shutil.which("ray") or "ray", "start", "--head", "--node-ip-address", "127.0.0.1"]
    command += ["--port", str(port), "--num-cpus", "3", "--include-dashboard=false", "--disable-usage-stats"]
    command += ["--temp-dir", str(temp), *ports]
    start = subprocess.Popen(  # its daemons stay in this new process group: ended below, none other
        command,
        env=counting(env_threads(1), compiles),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output = start.communicate(timeout=180)[0].decode()
    try:
        assert start.returncode == 0, output[-3000:]
        yield f"127.0.0.1:{port}"
    finally:
        if "ray" in sys.modules and sys.modules["ray"].is_initialized():  # the API's run joined it
            sys.modules["ray"].shutdown()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(start.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(3)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's 3 steps in one process, one thread (no launcher)."""
    out = tmp_path_factory.mktemp("ray") / "one"
    done = cli("train", QUICKSTART, "--out", out, *SMALL, *SAVE, env=env_threads(1))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def ray_train(
    address: str, out: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    launch = ["--launcher", "ray", "--ray-address", address]
    return cli("train", QUICKSTART, "--out", out, *SMALL, *SAVE, *launch, *args, env=env or env_threads(2))


@pytest.mark.slow
def test_trained_on_ray_as_in_one_process(
    cluster: str, one_process: Path, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    """One trainer actor (the API), then a trainer and a rollout worker at S = 0 (the CLI): each is the
    one-process run."""
    small = {"steps": 3, "batch": 4, "group": 4, "eval_every": 3, "eval_size": 8, "save_every": 3}
    sync = srpo_dsl.load(QUICKSTART).train(tmp_path / "sync", launcher="ray", ray_address=cluster, **small)
    assert [r["step"] for r in sync.history] == [1, 2, 3]
    assert "held-out Avg@4" in capfd.readouterr().out  # the trainer's report, as the self-launch shows it
    same_run(one_process, tmp_path / "sync")
    workers = ["--option", "rollout_workers=1", "--option", "max_staleness=0"]
    run = ray_train(cluster, tmp_path / "async", *workers)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-1].startswith("held-out Avg@4"), run.stdout  # the trainer's report
    rows = metrics(tmp_path / "async")
    assert all(r["async/staleness_max"] == 0 and r["async/workers"] == 1 for r in rows)
    same_run(one_process, tmp_path / "async")


@pytest.mark.slow
def test_the_dry_run_on_ray_shows_each_actor_joined(cluster: str, compiles: Path, tmp_path: Path) -> None:
    """Two trainer ranks and a rollout worker, each an actor reading the driver's plan from the run folder:
    the workflow is compiled once, by the driver."""
    compiles.unlink(missing_ok=True)
    args = ["--option", "rollout_workers=1", "--ray-processes", "3", "--dry-run"]
    done = ray_train(cluster, tmp_path / "dry", *args, env=counting(env_threads(2), compiles))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        "dry run: 3 processes on 1 node (2 trainer ranks, 1 rollout worker), connected"
    )
    assert "rank 2/3  rollout worker 0  node 0 (" in lines[3] and lines[3].endswith("cpu")
    assert compiling_processes(compiles) == 1  # of 4: the driver, two trainer ranks, the worker
    assert not (tmp_path / "dry").exists()


def actor_of(out: Path, rank: int) -> psutil.Process | None:
    """The Ray actor process whose child runs rank `rank` of the run into `out` (None: none yet)."""
    child = process_of(out, rank)
    return child.parent() if child is not None else None


def process_of(out: Path, rank: int) -> psutil.Process | None:
    """The process of rank `rank` of the run into `out` (None: none yet)."""
    for process in psutil.process_iter(["cmdline"]):
        try:
            if str(out) in (process.info["cmdline"] or []) and process.environ().get("RANK") == str(rank):
                return process
        except psutil.Error:
            continue
    return None


@pytest.mark.slow
def test_a_killed_worker_actor_hands_its_steps_on_and_none_left_is_one_line(
    cluster: str, tmp_path: Path
) -> None:
    """Two workers: one's actor process killed at step 2, the run goes on; the other's at step 4: the
    trainer checkpoints what it trained and stops with one line."""
    out = tmp_path / "run"
    args = ["train", QUICKSTART, "--out", out, *SMALL, "--steps", "8", "--option", "save_every=8"]
    args += ["--option", "rollout_workers=2", "--option", "max_staleness=1"]
    args += ["--launcher", "ray", "--ray-address", cluster]
    command = [sys.executable, "-m", "srpo_dsl", *map(str, args)]
    run = subprocess.Popen(
        command, cwd=ROOT, env=env_threads(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_steps(run, out, 2)
    actors = {rank: actor_of(out, rank) for rank in (1, 2)}  # found now: a search takes a while
    actors[2].kill()  # type: ignore[union-attr]
    wait_for_steps(run, out, 4)
    actors[1].kill()  # type: ignore[union-attr]
    _, stderr = run.communicate(timeout=300)
    assert run.returncode not in (0, None), stderr[-3000:]
    assert "warning: rollout worker 1 (rank 2) stopped (" in stderr
    assert "warning: the Ray actor of rollout worker 1 (rank 2) died (" in stderr
    last = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(last) == 1 and "no rollout worker is left: step " in last[0], stderr[-3000:]
    assert "Traceback" not in stderr
    done = int(last[0].split(": step ")[1].split()[0])
    assert done >= 4 and (out / "checkpoints" / f"step-{done}").is_dir()
    assert [r["step"] for r in metrics(out)] == list(range(1, done + 1))


@pytest.mark.slow
def test_ctrl_c_on_the_driver_stops_every_process(cluster: str, tmp_path: Path) -> None:
    """SIGINT reaches the trainer and the worker as they start (a Ray worker blocks it: their processes
    unblock it), the driver returns the trainer's exit code (130), and no process of the run is left."""
    out = tmp_path / "run"
    args = ["train", QUICKSTART, "--out", out, *SMALL, "--option", "rollout_workers=1"]
    args += ["--steps", "10000"]  # the signal lands mid-run however slowly this test sees the actors start
    command = [
        sys.executable,
        "-m",
        "srpo_dsl",
        *map(str, [*args, "--launcher", "ray", "--ray-address", cluster]),
    ]
    run = subprocess.Popen(
        command, cwd=ROOT, env=env_threads(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 300
    while (trainer := actor_of(out, 0)) is None or actor_of(out, 1) is None:
        assert run.poll() is None and time.time() < deadline, "the run did not start"
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stderr[-3000:]  # (interrupted while importing: Python's traceback)
    trainer.wait(30)  # its actor is gone, and so is every process of the run
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(out) in (p.info["cmdline"] or [])]


@pytest.mark.slow
def test_a_worker_killed_before_it_joined_ends_the_run_at_once(cluster: str, tmp_path: Path) -> None:
    """A worker's process killed as it starts, before every process joined the launch: the driver stops
    the run with one line and the worker's code (the trainer would wait for it at the rendezvous)."""
    out = tmp_path / "run"
    args = ["train", QUICKSTART, "--out", out, *SMALL, "--option", "rollout_workers=1"]
    args += ["--launcher", "ray", "--ray-address", cluster]
    run = subprocess.Popen(
        [sys.executable, "-m", "srpo_dsl", *map(str, args)],
        cwd=ROOT, env=env_threads(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 300
    while (worker := process_of(out, 1)) is None:
        assert run.poll() is None and time.time() < deadline, "the run did not start"
        time.sleep(0.02)
    worker.send_signal(signal.SIGKILL)
    clock = time.time()
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGKILL and time.time() - clock < 60, stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.startswith("error: ")] == [
        "error: rollout worker 0 (rank 1) ended (SIGKILL) before every process joined the launch: "
        "nothing was trained"
    ]
    assert not out.exists() or not [p for p in out.iterdir() if p.name != ".lock"]


def test_a_cluster_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    done = cli("train", QUICKSTART, "--out", tmp_path / "run", "--launcher", "ray", "--ray-address", address)
    assert done.returncode == 2
    assert (
        done.stderr == f"error: --ray-address {address}: no Ray cluster answers there (Connection refused)\n"
    )
    assert not (tmp_path / "run").exists()
    alone = cli("train", QUICKSTART, "--out", tmp_path / "run", "--ray-processes", "2")
    assert alone.returncode == 2
    assert alone.stderr == "error: --ray-address, --ray-processes and --ray-cpus go with --launcher ray\n"


@contextmanager
def web_server() -> Iterator[str]:
    """HOST:PORT of a plain HTTP server on loopback: it answers, but not as Ray."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def grpc_server(cluster_id: bool) -> Iterator[tuple[str, list[float]]]:
    """HOST:PORT of a gRPC server (on every address: Ray dials the node's own), and the times it was
    asked for a cluster id: it answers that call alone (`cluster_id`), as a GCS would, or no call at all."""
    import grpc
    from ray.core.generated import gcs_service_pb2

    asked: list[float] = []

    def answer(request: object, context: object) -> object:
        asked.append(time.monotonic())
        return gcs_service_pb2.GetClusterIdReply()

    server = grpc.server(futures.ThreadPoolExecutor(2))
    if cluster_id:
        method = grpc.unary_unary_rpc_method_handler(
            answer,
            request_deserializer=gcs_service_pb2.GetClusterIdRequest.FromString,
            response_serializer=gcs_service_pb2.GetClusterIdReply.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("ray.rpc.NodeInfoGcsService", {"GetClusterId": method}),)
        )
    port = server.add_insecure_port("0.0.0.0:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", asked
    finally:
        server.stop(0)


def test_a_port_that_answers_but_is_not_ray_is_one_line_at_once(tmp_path: Path) -> None:
    """A web server held `ray.init` for minutes of Ray's warnings: one gRPC call of at most 5 s tells, one
    line, exit 2; so is a gRPC server that is not Ray's."""
    with web_server() as address:
        started = time.monotonic()
        with pytest.raises(UsageError, match="it answers, but not as a Ray cluster's head"):
            probe(address)
        assert time.monotonic() - started < 5
        launch = ("--launcher", "ray", "--ray-address", address)
        done = cli("train", QUICKSTART, "--out", tmp_path / "run", *launch, timeout=90)
    said = "it answers, but not as a Ray cluster's head (it does not speak gRPC)"
    assert done.returncode == 2 and done.stderr == f"error: --ray-address {address}: {said}\n", done.stderr
    assert not (tmp_path / "run").exists()
    with grpc_server(cluster_id=False) as (bare, _), pytest.raises(UsageError, match="without Ray's GCS"):
        probe(bare)


def test_a_sigterm_while_joining_the_cluster_ends_the_command_as_sigterm_does(tmp_path: Path) -> None:
    """Ray sets a SIGTERM handler of its own while `ray.init` joins (`sys.exit(15)` from its frame): the
    command said "SystemExit(15) raised there would end the command"; it ends as SIGTERM ends it, 143."""
    with grpc_server(cluster_id=True) as (address, asked):
        args = ["train", QUICKSTART, "--out", tmp_path / "run", "--launcher", "ray", "--ray-address", address]
        driver = subprocess.Popen(
            [sys.executable, "-m", "srpo_dsl", *map(str, args), "--dry-run"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while len(asked) < 2 and time.monotonic() < deadline and driver.poll() is None:  # the probe, then Ray
            time.sleep(0.2)
        time.sleep(1)
        driver.send_signal(signal.SIGTERM)
        stderr = driver.communicate(timeout=60)[1]
    assert len(asked) >= 2 and driver.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "SystemExit" not in stderr and "\nerror: " not in f"\n{stderr}" and not (tmp_path / "run").exists()


def test_an_actor_streams_its_process_s_output_and_exit_code(tmp_path: Path) -> None:
    """The actor's body outside Ray: stdout and stderr apart, as written, then the command's exit code."""
    items = list(RankProcess().run(["validate", str(tmp_path / "absent.srpo")], {}, str(ROOT)))
    err = b"".join(value for kind, value in items if kind == "err").decode()
    assert items[-1] == ("exit", 2) and err.startswith("error: ") and "absent.srpo" in err
    assert not [value for kind, value in items if kind == "out"]
    assert list(RankProcess().run(["--help"], {}, str(tmp_path / "gone")))[-1] == ("exit", 1)


def test_without_ray_installed_the_launcher_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(UsageError, match=r"^--launcher ray needs Ray, an optional extra: pip install"):
        import_ray()


def test_each_process_sees_its_node_s_gpus_as_torchrun_gives_them() -> None:
    """Two nodes of two GPUs each, ranks placed 0, 1 on node a and 2, 3 on node b: LOCAL_RANK counts on the
    node and its own GPU is at LOCAL_RANK of CUDA_VISIBLE_DEVICES; node b is node 1."""
    envs = launch_env([("a", ["3"]), ("a", ["1"]), ("b", ["0"]), ("b", ["1"])], ("10.0.0.1", 29500), 4)
    assert [(e["LOCAL_RANK"], e["GROUP_RANK"], e["CUDA_VISIBLE_DEVICES"]) for e in envs] == [
        ("0", "0", "3,1"),
        ("1", "0", "3,1"),
        ("0", "1", "0,1"),
        ("1", "1", "0,1"),
    ]
    assert all(e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "2" for e in envs)
    assert envs[3] | {"RANK": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"} == envs[3]
    assert "CUDA_VISIBLE_DEVICES" not in launch_env([("a", [])], ("h", 1), 1)[0]
