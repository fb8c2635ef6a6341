"""Asynchronous rollouts: the launch layout, the staleness bound, the link between processes (real gloo
groups), and training runs with a rollout worker against the synchronous trainer."""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from srpo_dsl.backends.base import GenRequest, GenResult
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.rl.distributed.process_group import free_port
from srpo_dsl.rl.transport.fresh import Refresh, fresh_engines
from srpo_dsl.rl.transport.inbox import Inbox
from srpo_dsl.rl.transport.link import (
    CONTROL,
    EPISODES,
    LaunchLayout,
    Link,
    LinkError,
    Orders,
    RolloutBatch,
    flatten,
    join_launch,
    unflatten,
)
from srpo_dsl.rl.transport.remote_weights import Header, Weights
from srpo_dsl.rl.transport.staleness import episode_staleness, stale_rows, trained_versions, within_bound
from srpo_dsl.runtime.episode import Episode, Event, Member
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
from tests.support.clitools import ROOT, cli
from tests.support.compiles.count import compiling_processes, counting
from tests.support.runs import QUICKSTART, SMALL, env_threads, first_result, metrics, weights


def member(policy: str, version: int) -> Member:
    return Member(0, "solver", 0, policy, version, [1, 2], [3], [-0.5], "x", True)


def episode(*members: Member) -> Episode:
    ep = Episode("p/0", "p", 0, {"id": "p"})
    ep.events = [Event(f"e{i}", "solver", "n", "s", 1, True, [m]) for i, m in enumerate(members)]
    return ep


# --- the layout of a launch ----------------------------------------------------------------


def test_the_first_ranks_train_and_the_workers_take_steps_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    layout = LaunchLayout.from_env(workers=2)
    assert (layout.trainers, layout.workers, layout.is_worker) == (2, 2, False)
    assert [layout.worker_of(t) for t in range(1, 6)] == [2, 3, 2, 3, 2]
    assert layout.steps_of(3, first=3, last=8) == [4, 6, 8]
    assert LaunchLayout(3, 2, 2).is_worker


def test_a_launch_without_a_trainer_or_a_launcher_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="rollout_workers = 2 needs at least 3 processes"):
        LaunchLayout.from_env(workers=2)
    monkeypatch.delenv("RANK")
    with pytest.raises(ValueError, match="start them with `srpo-dsl train`"):
        join_launch(1, "cpu")


# --- the staleness bound -------------------------------------------------------------------


def test_an_episode_is_as_stale_as_its_oldest_trained_member() -> None:
    mixed = episode(member("lm", 4), member("lm", 2), member("judge", 0))
    assert episode_staleness(mixed, current=5, trained={"lm"}) == 3  # the frozen judge never ages
    assert episode_staleness(episode(member("judge", 0)), current=5, trained={"lm"}) == 0


def test_episodes_over_the_bound_are_dropped_and_counted() -> None:
    eps = [episode(member("lm", v)) for v in (5, 4, 2, 3)]
    fresh = within_bound(eps, current=5, limit=1, trained={"lm"})
    assert fresh.episodes == [eps[0], eps[1]] and fresh.staleness == [0, 1] and fresh.dropped == 2
    assert fresh.metrics() == {
        "staleness_mean": 0.5,
        "staleness_max": 1.0,
        "versions_per_episode": 1.0,
        "dropped_episodes": 2.0,
    }
    assert within_bound(eps, current=5, limit=3, trained={"lm"}).dropped == 0


def test_an_episode_spanning_versions_is_bounded_by_its_oldest_trained_member() -> None:
    """Members of several versions in one episode (a worker took each new version between its calls):
    the bound keeps or drops the episode whole, by its oldest trained member, a resampled try included."""
    later = episode(member("lm", 4), member("lm", 5), member("lm", 5))  # began at 4: 1 stale
    began_old = episode(member("lm", 3), member("lm", 4), member("lm", 5))  # 2 stale, fresh at its end
    judged = episode(member("judge", 0), member("lm", 4))  # the frozen judge never ages
    retried = episode(member("lm", 5))
    retried.events[0].tries = [member("lm", 3)]  # its first try, by version 3, is trained on too
    fresh = within_bound([later, began_old, judged, retried], current=5, limit=1, trained={"lm"})
    assert fresh.episodes == [later, judged] and fresh.staleness == [1, 1] and fresh.dropped == 2
    assert fresh.versions == [2, 1]
    assert fresh.metrics()["versions_per_episode"] == 1.5
    kept = within_bound([later, began_old, judged, retried], current=5, limit=2, trained={"lm"})
    assert kept.dropped == 0 and kept.versions == [2, 3, 1, 2] and kept.staleness == [1, 2, 1, 2]


def test_only_trained_rows_with_old_weights_are_stale() -> None:
    rows = stale_rows([4, 5, 0, 3], ["lm", "lm", "judge", "lm"], current=5, trained={"lm"})
    assert rows.tolist() == [True, False, False, True]


def test_flatten_and_unflatten_round_trip() -> None:
    parts = [torch.arange(6.0).view(2, 3), torch.tensor(7.0), torch.ones(4)]
    flat = flatten(parts)
    assert flat.shape == (11,)
    back = unflatten(flat, [tuple(p.shape) for p in parts])
    assert all(torch.equal(a, b) for a, b in zip(parts, back))


# --- a worker's engine takes the newest version before each generation call ----------------


def version_of(engine: HFBackend, version: int, shift: float) -> Weights:
    """Version `version` of `lm` as the trainer sends it: the engine's parameters, each + `shift`."""
    pairs = [(n, p.detach() + shift) for n, p in engine.model.named_parameters()]
    flat = flatten([t for _, t in pairs])
    header = Header(
        version,
        {"lm": [n for n, _ in pairs]},
        {"lm": [tuple(t.shape) for _, t in pairs]},
        {"lm": str(flat.dtype).removeprefix("torch.")},
        {"lm": flat.numel()},
    )
    return Weights(header, {"lm": flat})


class TrainerStepsDuringFirstCall(HFBackend):
    """The hf engine of a worker whose trainer makes version 1 while the worker's first generation call
    (the solvers' round) runs: the version reaches the worker's inbox before that call returns."""

    def __init__(self, path: Path, inbox: Inbox):
        super().__init__(path)
        self.inbox, self.calls = inbox, 0
        self.next = version_of(self, 1, shift=0.5)

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        out = super().generate(requests, seed=seed)
        self.calls += 1
        if self.calls == 1:
            self.inbox.keep(self.next)
        return out


@pytest.mark.parametrize("newest", [True, False])
def test_a_version_made_mid_episode_generates_the_episodes_later_events(
    tiny_random_model: Path, newest: bool
) -> None:
    """The quickstart (solvers, then verifier, then aggregator: three calls) on a worker holding version 0
    for step 2 (S = 1); version 1 arrives during the first call. `newest`: the solvers' event is version
    0's, the later events version 1's, and the engine ends with version 1's weights; `scheduled`: the
    whole batch is version 0's."""
    wf = load_workflow(QUICKSTART)
    inbox = Inbox(link=None, newest=newest)
    engine = TrainerStepsDuringFirstCall(tiny_random_model, inbox)
    start = version_of(engine, 0, shift=0.0)
    refresh = Refresh({"lm": engine}, inbox if newest else None)
    executor = Executor(wf.graph, fresh_engines({"lm": engine}, refresh), wf.renderer(), build_tools(wf))
    inbox.keep(start)
    inbox.take(Orders([(2, 0)]))
    order, weights = inbox.next_step()
    assert order.step == 2 and weights is start
    refresh.offer(weights)
    episodes = executor.run(task_data(wf, split="train")[:2], samples=2, seed=7)
    later = 1 if newest else 0
    for ep in episodes:
        assert [{m.policy_version for m in e.members} for e in ep.events] == [{0}, {later}, {later}]
        assert len(ep.events[0].members) == 2
    assert engine.version == later and engine.calls == 3
    loaded = torch.cat([p.detach().reshape(-1) for p in engine.model.parameters()])
    assert torch.equal(loaded, (engine.next if newest else start).flats["lm"])
    # the trainer takes the batch at step 2 holding version 1: within S = 1 by its oldest member
    assert all(episode_staleness(ep, 1, {"lm"}) == 1 for ep in episodes)
    assert {len(trained_versions(ep, {"lm"})) for ep in episodes} == {2 if newest else 1}
    assert within_bound(episodes, current=1, limit=0, trained={"lm"}).dropped == 4


# --- the link, over real gloo groups between two processes ---------------------------------


def _peer(port: int, out: mp.Queue, rank: int, die: bool) -> None:
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, datetime.timedelta(seconds=30))
    link = Link(LaunchLayout(rank, 1, 1), store, torch.device("cpu"))
    if rank == 1:  # the worker
        if die:
            os._exit(3)  # a crash: no goodbye
        link.send_object(RolloutBatch(7, 6, 0.5, [episode(member("lm", 6))]), 0, 20)
        link.send_tensor(torch.arange(5.0), 0, 40)
        link.flush()
        return
    try:
        batch = link.recv_object(1, 20)
        tensor = link.recv_tensor(torch.zeros(5), 1, 40)
        out.put((batch.step, batch.version, batch.episodes[0].events[0].members[0].policy, tensor.tolist()))
    except LinkError as exc:
        out.put(str(exc))


def _run_pair(die: bool) -> object:
    return first_result([(_peer, (r, die)) for r in (0, 1)])


def test_episodes_and_tensors_cross_the_link_in_order() -> None:
    assert _run_pair(die=False) == (7, 6, "lm", [0.0, 1.0, 2.0, 3.0, 4.0])


def test_a_dead_worker_is_one_line_naming_it() -> None:
    message = _run_pair(die=True)
    assert isinstance(message, str) and message.startswith("rollout worker 0 (rank 1) stopped (")
    assert "\n" not in message


def _closing(port: int, out: mp.Queue, rank: int) -> None:
    """The worker closes its link while a thread waits on trainer rank 0, which waits on the worker."""
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, datetime.timedelta(seconds=30))
    link = Link(LaunchLayout(rank, 1, 1), store, torch.device("cpu"))
    if rank == 0:
        with contextlib.suppress(LinkError):
            link.recv_object(1, EPISODES)
        return
    errors: list[str] = []

    def wait_for_orders() -> None:
        try:
            link.recv_object(0, CONTROL)
        except LinkError as exc:
            errors.append(str(exc))

    reader = threading.Thread(target=wait_for_orders)
    link.read(reader)
    time.sleep(0.5)
    began = time.perf_counter()
    link.close()
    out.put((time.perf_counter() - began, reader.is_alive(), errors))


def test_closing_the_link_wakes_a_thread_waiting_on_a_peer_at_once() -> None:
    """gloo's abort wakes no receive: `close` hangs up instead of waiting out its 30-s join."""
    seconds, alive, errors = first_result([(_closing, (r,)) for r in (0, 1)])  # type: ignore[misc]
    assert seconds < 5 and not alive
    assert errors == ["trainer rank 0 stopped (Application timeout caused pair closure)"]


# --- training with a rollout worker --------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.slow
def test_staleness_zero_gives_the_synchronous_trainers_weights(tmp_path: Path) -> None:
    """Same seeds, one thread per process: S = 0 with a worker is the synchronous run, bit for bit."""
    save = ["--option", "save_every=3"]
    sync = cli("train", QUICKSTART, "--out", tmp_path / "sync", *SMALL, *save, env=env_threads(1))
    assert sync.returncode == 0, sync.stderr[-2000:]
    workers = ["--option", "rollout_workers=1", "--option", "max_staleness=0"]
    run = cli("train", QUICKSTART, "--out", tmp_path / "async", *SMALL, *save, *workers, env=env_threads(2))
    assert run.returncode == 0, run.stderr[-2000:]
    a, b = metrics(tmp_path / "sync"), metrics(tmp_path / "async")
    assert [(r["return"], r["loss"], r["grad_norm"]) for r in a] == [
        (r["return"], r["loss"], r["grad_norm"]) for r in b
    ]
    assert all(r["async/staleness_max"] == 0 for r in b)
    first, second = weights(tmp_path / "sync", 3), weights(tmp_path / "async", 3)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.distributed
@pytest.mark.slow
def test_a_stale_run_records_its_staleness(tmp_path: Path) -> None:
    """The workflow compiled once, by the command: the trainer and the worker read its plan from the run
    folder. (Resuming one: tests/rl/test_reproducible.py, exact after SIGKILL; tests/rl/test_worker_faults.py.)"""
    workers = ["--option", "rollout_workers=1", "--option", "max_staleness=1"]
    out, compiles = tmp_path / "run", tmp_path / "compiles"
    run = cli("train", QUICKSTART, "--out", out, *SMALL, *workers, env=counting(env_threads(2), compiles))
    assert run.returncode == 0, run.stderr[-2000:]
    assert compiling_processes(compiles) == 1  # of 3: the command, the trainer, the worker
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # the plan went with it
    assert run.stdout.splitlines()[-1].startswith("held-out Avg@4")  # one report, from the trainer
    rows = metrics(out)
    assert [r["async/staleness_max"] for r in rows] == [0.0, 1.0, 1.0]  # the worker ran one step ahead
    # newest weights: a step's later calls may take the version made meanwhile, never two versions more
    assert rows[0]["async/versions_per_episode"] == 1.0
    assert all(1.0 <= r["async/versions_per_episode"] <= 2.0 for r in rows)
    assert all(r["async/dropped_episodes"] == 0 and r["time/trainer_idle"] >= 0 for r in rows)
    assert "importance_weight_mean" not in rows[0]  # on-policy: nothing to correct
    assert all(
        0 < r["importance_weight_mean"] <= 2.0 and 0 <= r["importance_capped_fraction"] <= 1 for r in rows[1:]
    )


@pytest.mark.distributed
@pytest.mark.slow
def test_a_failing_worker_stops_the_run_with_one_line_and_no_files(tmp_path: Path) -> None:
    team = tmp_path / "team.srpo"
    shutil.copytree(ROOT / "workflows" / "quickstart", tmp_path / "quickstart")
    (tmp_path / "r.py").write_text(  # fails on the worker's training batch, not the trainer's evaluation
        "def score(answer, row):\n    if row['id'].startswith('arith-train'):\n        raise ValueError('no')\n"
        "    return 0.0\n"
    )
    text = QUICKSTART.read_text().replace(
        "reward exact_match(aggregator, task.answer)", 'reward "r.py:score"(aggregator)'
    )
    team.write_text(text)
    workers = ["--option", "rollout_workers=1"]
    run = cli("train", team, "--out", tmp_path / "run", *SMALL, *workers, env=env_threads(2))
    assert run.returncode != 0
    assert "Traceback" not in run.stderr and "terminate" not in run.stderr, run.stderr[-2000:]
    assert "error: " + str(tmp_path / "r.py") + ":3: score() raised" in run.stderr  # the worker's own line
    assert "error: rollout worker 0 (rank 1) stopped (" in run.stderr  # then the trainer's
    assert not (tmp_path / "run").exists()


@pytest.mark.distributed
@pytest.mark.slow
def test_two_trainer_ranks_and_a_worker_train_as_one_process(tmp_path: Path) -> None:
    """torchrun starts 3 processes: trainer ranks 0 and 1 (ZeRO-2) each take their share of every batch
    from the worker (rank 2); with S = 0 the run is the one-process synchronous run (1e-5)."""
    args = [*SMALL, "--zero", "2", "--option", "save_every=3"]
    one = cli("train", QUICKSTART, "--out", tmp_path / "one", *args, env=env_threads(1))
    assert one.returncode == 0, one.stderr[-2000:]
    workers = ["--option", "rollout_workers=1", "--option", "max_staleness=0"]
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", "3", "--master_port", str(free_port())]
    command = [sys.executable, *launch, "-m", "srpo_dsl", "train", QUICKSTART, "--out", tmp_path / "three"]
    compiles = tmp_path / "compiles"
    three = subprocess.run(
        [*map(str, command), *map(str, args), *workers],
        cwd=ROOT,
        env=counting(env_threads(1), compiles),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert three.returncode == 0, three.stderr[-3000:]
    assert compiling_processes(compiles) == 1  # of 3: rank 0 hands its plan to the other two
    a, b = metrics(tmp_path / "one"), metrics(tmp_path / "three")
    assert [r["num_events"] for r in a] == [r["num_events"] for r in b]
    for x, y in zip(a, b):
        for key in ("return", "grad_norm"):
            assert x[key] == pytest.approx(y[key], rel=1e-5), (x["step"], key)
    assert all(r["async/staleness_max"] == 0 and r["async/workers"] == 1 for r in b)
    first, second = weights(tmp_path / "one", 3), weights(tmp_path / "three", 3)
    assert all(torch.allclose(first[k], second[k], atol=1e-5) for k in first)
