"""Two nodes on one machine (`tests/support/nodes.py`: network namespaces joined by a veth pair) running the
commands of docs/training.md's "Many nodes" as written there, read from the page: the dry run, two-node
training against one process at ZeRO-3 and ZeRO-2, and a rollout worker on the other node against the
synchronous run; then both nodes as one Ray cluster (`--launcher ray`), against one process. Every process gets the page's `export`s and none of this environment's launcher
variables; a failure shows each process's stderr tail."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from srpo_dsl.rl.distributed.process_group import free_port
from srpo_dsl.sweep.runner import LAUNCHER_VARIABLES
from tests.support.clitools import ROOT, cli
from tests.support.markdown import agrees, indented_blocks, section
from tests.support.nodes import INTERFACES, NODES, SETUP, TEARDOWN, Nodes, two_nodes_fixture  # noqa: F401
from tests.support.runs import QUICKSTART, SMALL, env_threads, metrics, same_run

pytestmark = pytest.mark.distributed

GUIDE = ROOT / "docs" / "training.md"
NAMESPACES = "### Try it on one Linux machine: two network namespaces as two nodes"
TIMEOUT = 150  # seconds for one command on both nodes (each run takes 10-25 s here)
NOT_PASSED = (*LAUNCHER_VARIABLES, "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "GROUP_RANK", "CROSS_RANK")


# --- the page's commands -------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """A step of the page: commands on both nodes at once (`pair`), one command, or shown output."""

    pair: tuple[list[str], list[str]] | None = None
    command: list[str] | None = None
    shown: list[str] | None = None


def subsection(lines: list[str], heading: str) -> list[str]:
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("### ")), len(lines))
    return lines[start:end]


def commands(block: list[str]) -> list[list[str]]:
    """A code block's command lines, continuation lines joined, comments left out."""
    joined, current = [], ""
    for line in block:
        current += line.strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if shlex.split(current, comments=True):
            joined.append(shlex.split(current, comments=True))
        current = ""
    return joined


def page() -> tuple[list[list[str]], dict[str, str], list[Step]]:
    """The namespace recipe: its `ip` commands, its `export`s, and its steps in order."""
    lines = subsection(section(GUIDE.read_text(encoding="utf-8"), "## Many nodes"), NAMESPACES)
    ip, exports, steps, background = [], {}, [], None
    for block in indented_blocks(lines):
        if block[0].startswith("dry run:"):
            steps.append(Step(shown=[line.rstrip() for line in block]))
            continue
        for argv in commands(block):
            if argv[0] == "export":
                exports.update(part.split("=", 1) for part in argv[1:])
            elif argv[0] == "ip" and argv[:3] != ["ip", "netns", "exec"]:
                ip.append(argv)
            elif argv[0] != "ip":
                steps.append(Step(command=argv))
            elif argv[-1] == "&":
                background = argv[:-1]
            else:
                steps.append(Step(pair=(background, argv)))
    return ip, exports, steps


def pairs(dry: bool) -> list[tuple[list[str], list[str]]]:
    return [s.pair for s in page()[2] if s.pair is not None and ("--dry-run" in s.pair[0]) == dry]


def test_the_page_makes_the_nodes_as_the_tests_do_and_runs_one_command_per_node() -> None:
    ip, exports, steps = page()
    assert [shlex.join(argv) for argv in ip] == SETUP + TEARDOWN
    assert exports == {"OMP_NUM_THREADS": "1"}
    assert len(pairs(dry=True)) == 2 and len(pairs(dry=False)) == 2
    for first, second in [s.pair for s in steps if s.pair is not None]:
        assert first[3:5] == [NODES[0], "torchrun"] and second[3] == NODES[1]
        assert first[first.index("--node_rank") + 1] == "0" and second[second.index("--node_rank") + 1] == "1"
        differ = [a for a, b in zip(first, second) if a != b]
        assert len(first) == len(second) and differ == [NODES[0], "0"], (
            "only the namespace and node rank differ"
        )


# --- running them --------------------------------------------------------------------------


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str

    def tail(self, name: str) -> str:
        """The exit code, srpo-dsl's own error lines (the launcher's report follows them), the stderr tail."""
        ours = [line for line in self.stderr.splitlines() if re.match(r"(internal )?error: ", line)]
        return "\n".join(
            [f"--- {name}: exit {self.returncode}", *ours, "--- stderr tail:", self.stderr[-2000:]]
        )


def environment(exports: dict[str, str]) -> dict[str, str]:
    """This environment without launcher or interface variables, with the page's exports; srpo-dsl is
    this checkout's; no progress bars (stderr is for the failure's tail)."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED}
    return env | exports | {"PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}


def program(argv: list[str]) -> list[str]:
    """`argv` with `torchrun` and `srpo-dsl` as this Python runs them."""
    swap = {
        "torchrun": [sys.executable, "-m", "torch.distributed.run"],
        "srpo-dsl": [sys.executable, "-m", "srpo_dsl"],
    }
    return [part for arg in argv for part in swap.get(arg, [arg])]


def start(argv: list[str], folder: Path, env: dict[str, str], name: str) -> subprocess.Popen:
    """`argv` in a session of its own, its stdout and stderr into folder/NAME.out and NAME.err."""
    with open(folder / f"{name}.out", "w") as out, open(folder / f"{name}.err", "w") as err:
        return subprocess.Popen(
            program(argv), cwd=folder, env=env, stdout=out, stderr=err, start_new_session=True
        )


def finish(process: subprocess.Popen, folder: Path, name: str) -> Done:
    """Wait for `process` and read what it wrote. Past TIMEOUT its session is stopped: torchrun, on
    SIGTERM, stops its workers (they run in sessions of their own), then SIGKILL."""
    try:
        code = process.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            code = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
    out, err = ((folder / f"{name}.{kind}").read_text(errors="replace") for kind in ("out", "err"))
    return Done(code, out, err)


def on_both(
    pair: tuple[list[str], list[str]], folder: Path, env: dict[str, str], node0: dict[str, str] | None = None
) -> tuple[Done, Done]:
    """Both nodes' commands at once (node 0's with `node0` added to `env`); each one's exit code, stdout
    and stderr."""
    first = start(pair[0], folder, env | (node0 or {}), "node0")
    second = start(pair[1], folder, env, "node1")
    return finish(first, folder, "node0"), finish(second, folder, "node1")


def tails(*done: Done) -> str:
    return "\n".join(d.tail(f"node {n}") for n, d in enumerate(done))


def workspace(folder: Path) -> Path:
    """`folder` with the workflows and data: where the page's relative paths (`runs/...`) land."""
    for name in ("workflows", "data"):
        shutil.copytree(ROOT / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The training runs' workspace, shared: the one-process runs are compared with several tests' runs."""
    return workspace(tmp_path_factory.mktemp("multinode"))


@pytest.fixture(scope="module")
def one_node(work: Path) -> Callable[[int], Path]:
    """The page's one-process run at a ZeRO stage (run once per stage): its folder."""
    (command,) = [s.command for s in page()[2] if s.command is not None]
    done: dict[int, Path] = {}

    def run(zero: int) -> Path:
        if zero not in done:
            argv = at_stage(command, zero)
            ran = subprocess.run(
                program(argv),
                cwd=work,
                env=environment(page()[1]),
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
            assert ran.returncode == 0, ran.stderr[-2500:]
            done[zero] = work / argv[argv.index("--out") + 1]
        return done[zero]

    return run


def at_stage(argv: list[str], zero: int) -> list[str]:
    """The page's command (at ZeRO-3) at stage `zero`, into an --out of its own."""
    stage, out = argv.index("--zero") + 1, argv.index("--out") + 1
    assert argv[stage] == "3"
    if zero == 3:
        return argv
    changed = list(argv)
    changed[stage], changed[out] = str(zero), f"{argv[out]}-zero{zero}"
    return changed


def out_of(argv: list[str], folder: Path) -> Path:
    return folder / argv[argv.index("--out") + 1]


def full_weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    """Every engine's full fp32 parameters at `step`, its ranks' ZeRO shards gathered by DeepSpeed's
    `zero_to_fp32` (as `srpo-dsl export` reads them), keyed `OWNER/NAME`."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    out = {}
    for state in sorted((run / "checkpoints" / f"step-{step}").glob("*/state")):
        full = get_fp32_state_dict_from_zero_checkpoint(str(state.parent), tag=state.name)
        out |= {f"{state.parent.name}/{k}": v for k, v in full.items()}
    assert out, f"no engine state in {run}/checkpoints/step-{step}"
    return out


# --- the tests that need the two nodes ------------------------------------------------------


@pytest.mark.slow
def test_gloo_is_given_the_interface_that_reaches_the_master(two_nodes: Nodes) -> None:
    """`rl.distributed.network`: the hostname resolves to a loopback address in the namespaces, so srpo-dsl names
    the interface that reaches MASTER_ADDR; a loopback MASTER_ADDR or the user's own choice is kept."""
    probe = "from srpo_dsl.rl.distributed.network import use_route_to_master as u; import os; print(u(), os.environ.get('GLOO_SOCKET_IFNAME'))"

    def chosen(**env: str) -> str:
        argv = ["ip", "netns", "exec", NODES[1], sys.executable, "-c", probe]
        done = subprocess.run(argv, env=environment(env), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2500:]
        return done.stdout.strip()

    assert chosen(MASTER_ADDR=two_nodes.addresses[0]) == f"{INTERFACES[1]} {INTERFACES[1]}"
    assert chosen(MASTER_ADDR="127.0.0.1") == "None None"
    assert chosen(MASTER_ADDR=two_nodes.addresses[0], GLOO_SOCKET_IFNAME="lo") == "lo lo"


@pytest.mark.slow
def test_the_dry_run_prints_each_ranks_role_node_and_device(two_nodes: Nodes, tmp_path: Path) -> None:
    work, steps = workspace(tmp_path), page()[2]
    shown = {i: steps[i + 1].shown for i, s in enumerate(steps) if s.pair and "--dry-run" in s.pair[0]}
    assert len(shown) == 2 and all(shown.values()), "each dry run on the page is followed by its output"
    for i, lines in shown.items():
        first, second = on_both(steps[i].pair, work, environment(page()[1]))
        assert first.returncode == 0 and second.returncode == 0, tails(first, second)
        printed = first.stdout.splitlines()
        same = len(printed) == len(lines) and all(map(agrees, lines, printed))
        assert same, "\n".join(["--- shown", *lines, "--- printed", *printed, tails(first, second)])
        assert second.stdout == "", "rank 0 prints the table, the other ranks nothing"
        assert not out_of(steps[i].pair[0], work).exists(), "a dry run writes nothing"


@pytest.mark.slow
@pytest.mark.parametrize("zero", [3])  # ZeRO-2 over two ranks: tests/rl/test_async.py, on one node
def test_two_nodes_train_as_one_process_does(two_nodes: Nodes, work: Path, one_node, zero: int) -> None:
    (pair,) = [p for p in pairs(dry=False) if "rollout_workers=1" not in p[0]]
    pair = (at_stage(pair[0], zero), at_stage(pair[1], zero))
    first, second = on_both(pair, work, environment(page()[1]))
    assert first.returncode == 0 and second.returncode == 0, tails(first, second)
    assert first.stdout.splitlines()[-1].startswith("held-out Avg@4") and second.stdout == ""
    two, one = out_of(pair[0], work), one_node(zero)
    for a, b in zip(metrics(two), metrics(one), strict=True):
        assert a["return"] == pytest.approx(b["return"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)  # zero up to rounding (one epoch)
    shards = sorted(p.name for p in (two / "checkpoints" / "step-3").rglob("zero_pp_rank_*_optim_states.pt"))
    assert shards == [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)], "one shard per node"
    got, want = full_weights(two, 3), full_weights(one, 3)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow
def test_a_rollout_worker_on_the_other_node_gives_the_synchronous_run_bit_for_bit(
    two_nodes: Nodes, work: Path, one_node
) -> None:
    """Trainer rank 0 on node 0, rollout worker 0 on node 1, S = 0, one thread per process: exactly the
    one-process synchronous run, as on one machine (tests/rl/test_async.py)."""
    (pair,) = [p for p in pairs(dry=False) if "rollout_workers=1" in p[0]]
    assert "max_staleness=0" in pair[0]
    first, second = on_both(pair, work, environment(page()[1]))
    assert first.returncode == 0 and second.returncode == 0, tails(first, second)
    run, sync = out_of(pair[0], work), one_node(int(pair[0][pair[0].index("--zero") + 1]))
    a, b = metrics(run), metrics(sync)
    assert [(r["return"], r["loss"], r["grad_norm"]) for r in a] == [
        (r["return"], r["loss"], r["grad_norm"]) for r in b
    ]
    assert all(r["async/staleness_max"] == 0 for r in a)
    got, want = full_weights(run, 3), full_weights(sync, 3)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.slow
def test_a_node_whose_ranks_cannot_connect_stops_with_one_line(two_nodes: Nodes, tmp_path: Path) -> None:
    """A wrong GLOO_SOCKET_IFNAME on node 0: its rank says so in one line, and node 1's, whose rendezvous
    store went away with node 0's launcher, says that in at most one line, within seconds; neither is an
    internal error.
    (Node 1's launcher may end its rank with SIGTERM before the rank finds the store gone: a race on a busy
    machine, and then the rank says nothing of its own.)"""
    wrong = {"GLOO_SOCKET_IFNAME": "srpo-none"}
    started = time.monotonic()
    first, second = on_both(pairs(dry=True)[0], workspace(tmp_path), environment(page()[1]), wrong)
    assert first.returncode != 0 and second.returncode != 0, tails(first, second)
    # node 1 ends on its own: its rank, started after node 0's launcher took the store away, used to retry
    # connecting for torch's 30 minutes (here until TIMEOUT stopped it)
    assert time.monotonic() - started < TIMEOUT - 30, tails(first, second)
    ours = [[line for line in d.stderr.splitlines() if line.startswith("error: ")] for d in (first, second)]
    assert ours[0] == ["error: GLOO_SOCKET_IFNAME=srpo-none: this node has no network interface of that name"]
    assert len(ours[1]) <= 1, tails(first, second)
    assert "internal error" not in first.stderr + second.stderr, tails(first, second)


# --- a Ray cluster of the two nodes ---------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster(two_nodes: Nodes) -> Iterator[str]:
    """A Ray cluster of both nodes, one logical CPU each (a run of two processes spans them): the head on
    node 0, node 1 joining it; its processes ended by their process groups (not `ray stop`)."""
    pytest.importorskip("ray")
    temp = Path(tempfile.mkdtemp(prefix="srpo-ray2-", dir="/tmp"))  # Ray's socket paths have a length limit
    head, port = two_nodes.addresses[0], free_port()
    common = ["--num-cpus", "1", "--disable-usage-stats", "--object-store-memory", str(200 << 20)]
    commands = [
        ["--head", "--node-ip-address", head, "--port", str(port), "--include-dashboard=false"],
        ["--address", f"{head}:{port}", "--node-ip-address", two_nodes.addresses[1]],
    ]
    started = []
    try:
        for node, command in zip(two_nodes.names, commands):
            ray = [shutil.which("ray") or "ray", "start", *command, *common, "--temp-dir", str(temp / node)]
            started.append(start_ray(node, ray))
            output = started[-1].communicate(timeout=180)[0].decode()
            assert started[-1].returncode == 0, output[-3000:]
        yield f"{head}:{port}"
    finally:
        for process in started:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
                    time.sleep(2)
        shutil.rmtree(temp, ignore_errors=True)


def start_ray(node: str, command: list[str]) -> subprocess.Popen:
    """`ray start` on `node`; its daemons stay in this new process group (ended by the fixture)."""
    return subprocess.Popen(
        ["ip", "netns", "exec", node, *command],
        env=env_threads(1),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.slow
def test_a_ray_cluster_of_the_two_nodes_trains_as_one_process(
    ray_cluster: str, two_nodes: Nodes, tmp_path: Path
) -> None:
    """`--launcher ray` from node 0: the trainer's actor on one node, the rollout worker's on the other
    (the dry run says so), and at S = 0, one thread each, the run is the one-process run bit for bit."""
    save = ["--option", "save_every=3"]
    args = [
        "train",
        QUICKSTART,
        *SMALL,
        *save,
        "--option",
        "rollout_workers=1",
        "--option",
        "max_staleness=0",
    ]
    args += ["--launcher", "ray", "--ray-address", ray_cluster]

    def on_node0(out: Path, *extra: str) -> subprocess.CompletedProcess:
        command = ["ip", "netns", "exec", two_nodes.names[0], sys.executable, "-m", "srpo_dsl"]
        command += map(str, [*args, "--out", out, *extra])
        return subprocess.run(
            command, cwd=ROOT, env=env_threads(1), capture_output=True, text=True, timeout=300
        )

    dry = on_node0(tmp_path / "dry", "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert dry.stdout.startswith(
        "dry run: 2 processes on 2 nodes (1 trainer rank, 1 rollout worker), connected"
    )
    done = on_node0(tmp_path / "ray")
    assert done.returncode == 0, done.stderr[-3000:]
    one = cli("train", QUICKSTART, "--out", tmp_path / "one", *SMALL, *save, env=env_threads(1))
    assert one.returncode == 0, one.stderr[-3000:]
    same_run(tmp_path / "one", tmp_path / "ray")
