"""A training run's plan is built once where the run starts, and everything after reads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import srpo_dsl
from srpo_dsl.errors import UsageError
from srpo_dsl.lang import analysis
from srpo_dsl.rl.loop import plan as plan_module
from srpo_dsl.rl.loop.plan import RayLaunch, Setup, TrainError, TrainPlan, make_plan
from srpo_dsl.rl.loop.plan_io import planned, read_plan
from srpo_dsl.runfolder import PLAN
from tests.support.clitools import ROOT

QUICKSTART = ROOT / "workflows/quickstart.srpo"
SMALL = ["--option", "batch=2", "--option", "group=2", "--option", "eval_size=2", "--option", "eval_k=1"]


def cli_plan(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> TrainPlan:
    """The plan `srpo-dsl ARGV` (a `train` command) trains, captured where the CLI hands it to the API (nothing trains)."""
    from typer.main import get_command

    from srpo_dsl.cli import train_cmds
    from srpo_dsl.cli.main import app

    planned: list[TrainPlan] = []
    monkeypatch.setattr(train_cmds, "train_plan", lambda plan, **_: planned.append(plan) or _NoRun())
    monkeypatch.setattr(train_cmds, "report", lambda *_: None)
    get_command(app).main(argv, standalone_mode=False)
    return planned[0]


class _NoRun:
    history = ()


def test_a_train_compiles_the_workflow_once_and_resolves_its_options_once(tmp_path, monkeypatch) -> None:
    counts = {"analyses": 0, "resolutions": 0}
    analyze, resolve = analysis._analyze, plan_module.resolve_options

    def counted(key, function):
        def call(*args, **kwargs):
            counts[key] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(analysis, "_analyze", counted("analyses", analyze))
    monkeypatch.setattr(plan_module, "resolve_options", counted("resolutions", resolve))
    args = [
        "train",
        str(QUICKSTART),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "1",
        "--device",
        "cpu",
        *SMALL,
    ]
    plan = cli_plan(args, monkeypatch)
    assert counts == {"analyses": 1, "resolutions": 1}
    assert (plan.opts.steps, plan.opts.batch, plan.opts.eval_k, plan.device) == (1, 2, 1, "cpu")


def test_each_process_of_a_launch_reads_the_same_plan_from_the_run_folder(tmp_path, monkeypatch) -> None:
    """`srpo-dsl launched OUT` (each process of a launch) carries out the plan its launcher wrote into the
    run folder: the same plan, compiled graph included, with nothing compiled again; it starts no process
    of its own. The file goes with the launch, and the folder it made."""
    held = tmp_path / "held.jsonl"
    held.write_text('{"question": "1+1", "answer": "2"}\n')
    config = tmp_path / "ds.json"
    config.write_text('{"wall_clock_breakdown": false}')
    wf = srpo_dsl.load(ROOT / "workflows/quickstart_tools.srpo")  # a tool's schema travels too
    setup = Setup({"lm": "builtin:tiny"}, (held,), "cpu", "hf", "static", config, "none")
    monkeypatch.delenv("RANK", raising=False)
    overrides = {"lr": "0.001", "steps": 3, "set_norm": "mean", "rollout_workers": 1, "report_to": ["wandb"]}
    first = make_plan(wf, tmp_path / "run", overrides, False, setup)
    monkeypatch.setattr(analysis, "_analyze", lambda *_: pytest.fail("a launched process compiled"))
    with planned(first):
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [PLAN]
        again = cli_plan(["launched", str(tmp_path / "run")], monkeypatch)
    assert again.workflow.graph == first.workflow.graph and again.workflow.path == first.workflow.path
    assert again.opts == first.opts and again.setup == first.setup and again.out == first.out
    assert dict(again.ds_overrides) == {"wall_clock_breakdown": False} == dict(first.ds_overrides)
    assert (first.processes, again.processes, again.opts.trackers) == (2, 0, ("wandb",))
    assert not (tmp_path / "run").exists()


def test_a_plan_file_that_is_not_one_is_one_line(tmp_path) -> None:
    (tmp_path / PLAN).write_text('{"format": "srpo-plan/0", "plan": {}}')
    with pytest.raises(
        TrainError, match=r"^\S+\.plan\.json: not a plan this srpo-dsl reads \(srpo-plan/1\)$"
    ):
        read_plan(tmp_path)
    with pytest.raises(TrainError, match=r"^cannot read the run's plan \S+: No such file"):
        read_plan(tmp_path / "none")


def test_a_rank_handed_what_is_not_a_plan_says_so_in_one_line(monkeypatch) -> None:
    """Rank 1 of a launch reads rank 0's plan from the launch's store (`api.training.handed_plan`): there a
    plan of another srpo-dsl (another node's install) is one line, not a traceback; it plans nothing."""
    import datetime

    import torch.distributed as dist

    from srpo_dsl.api.training import handed_plan
    from srpo_dsl.rl.distributed.process_group import free_port, launch_store

    port = free_port()
    host = dist.TCPStore(
        "127.0.0.1", port, None, True, datetime.timedelta(seconds=10), wait_for_workers=False
    )
    host.set("srpo-plan/0", '{"format": "srpo-plan/0", "plan": {}}')
    for name, value in {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    launch_store.cache_clear()
    try:
        with pytest.raises(
            UsageError, match=r"^rank 0's plan \(srpo-plan/0\): not a plan this srpo-dsl reads"
        ):
            handed_plan(lambda: pytest.fail("rank 1 planned"))
    finally:
        launch_store.cache_clear()


def test_every_check_runs_before_anything_loads(tmp_path) -> None:
    wf = srpo_dsl.load(QUICKSTART)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"already exists \(notes.txt\): pass --resume"):
        make_plan(wf, tmp_path / "taken")
    with pytest.raises(TrainError, match="training option `lr`"):
        make_plan(wf, tmp_path / "a", {"lr": "fast"})
    adapters = srpo_dsl.load(ROOT / "workflows/quickstart_adapters.srpo")
    with pytest.raises(
        TrainError, match=r"gradient_checkpointing does not work with adapter\(...\) policies"
    ):
        make_plan(adapters, tmp_path / "a", {"gradient_checkpointing": True}, setup=Setup(device="cpu"))
    with pytest.raises(TrainError, match="train rolls out with hf or vllm"):
        make_plan(wf, tmp_path / "a", setup=Setup(backend="scripted", device="cpu"))
    with pytest.raises(UsageError, match=r"^offload 'two': expected one of none, optimizer, params, all$"):
        make_plan(wf, tmp_path / "a", setup=Setup(offload="two", device="cpu"))
    with pytest.raises(
        UsageError, match=r"^decode 'eager': expected one of auto, dynamic, static, compiled$"
    ):
        make_plan(wf, tmp_path / "a", setup=Setup(decode="eager", device="cpu"))
    same = (tmp_path / "x" / "held.jsonl", tmp_path / "y" / "held.jsonl")
    for path in same:
        path.parent.mkdir()
        path.write_text("{}\n")
    with pytest.raises(TrainError, match="distinct names"):
        make_plan(wf, tmp_path / "a", setup=Setup(eval_data=same, device="cpu"))
    assert not (tmp_path / "a").exists()


def test_processes_come_from_the_plan(tmp_path, monkeypatch) -> None:
    wf = srpo_dsl.load(QUICKSTART)
    monkeypatch.delenv("RANK", raising=False)
    alone = make_plan(wf, tmp_path / "a", {"rollout_workers": 2}, setup=Setup(device="cpu"))
    assert alone.processes == 3  # one trainer, two rollout workers, started by this call
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    launched = make_plan(wf, tmp_path / "a", {"rollout_workers": 2}, setup=Setup(device="cpu"))
    assert launched.processes == 0  # a launcher started the processes
    monkeypatch.setenv("WORLD_SIZE", "2")  # refused by the plan, before rank 0 waits for the others
    with pytest.raises(
        ValueError, match=r"^rollout_workers = 2 needs at least 3 processes \(one trainer\), the la"
    ):
        make_plan(wf, tmp_path / "a", {"rollout_workers": 2}, setup=Setup(device="cpu"))


def test_on_ray_every_process_is_started_by_the_call(tmp_path, monkeypatch) -> None:
    """`--launcher ray`: the actors are 1 + R or --ray-processes; each runs the plan's command (the device
    the cluster decided, no launcher flag); too few for the workers, or a launcher's process, is one line."""
    wf = srpo_dsl.load(QUICKSTART)
    monkeypatch.delenv("RANK", raising=False)
    on_ray = Setup(device="cpu", ray=RayLaunch("auto"))
    plan = make_plan(wf, tmp_path / "a", {"rollout_workers": 1}, setup=on_ray)
    assert plan.processes == 2 and plan.device == "cpu"
    with planned(plan):
        actor = read_plan(tmp_path / "a")  # on its node: the cluster's device, no launch of its own
    assert (actor.setup.ray, actor.device, actor.processes) == (None, "cpu", 0)
    four = Setup(device="cpu", ray=RayLaunch("auto", processes=4))
    assert make_plan(wf, tmp_path / "a", setup=four).processes == 4  # four trainer ranks
    one = Setup(device="cpu", ray=RayLaunch("auto", processes=1))
    with pytest.raises(
        TrainError, match=r"^--ray-processes 1: rollout_workers = 1 needs at least 2 processes"
    ):
        make_plan(wf, tmp_path / "a", {"rollout_workers": 1}, setup=one)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(TrainError, match="started by a launcher already"):
        make_plan(wf, tmp_path / "a", setup=on_ray)


def test_planning_imports_no_torch() -> None:
    """The dry run and the CLI read a plan without loading the trainer's libraries."""
    code = (
        "import sys, srpo_dsl; from srpo_dsl.rl.loop.plan import make_plan, Setup\n"
        f"make_plan(srpo_dsl.load({str(QUICKSTART)!r}), __import__('pathlib').Path('/nonexistent/x'), "
        "setup=Setup(device='cpu'))\n"
        "print(sorted(m for m in ('torch', 'transformers', 'deepspeed') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(ROOT))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_run_and_eval_load_no_trainer(tmp_path) -> None:
    """Rolling a workflow out checks its device and backend without importing the training loop."""
    code = (
        "import sys, srpo_dsl\n"
        f"wf = srpo_dsl.load({str(ROOT / 'workflows/math_routed.srpo')!r})\n"
        f"replies = {str(ROOT / 'workflows/math_replies.json')!r}\n"
        "wf.run(limit=1, backend='scripted', models=replies, device='cpu', progress=False)\n"
        "wf.evaluate(k=1, limit=1, backend='scripted', models=replies, device='cpu', progress=False)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('srpo_dsl.rl.loop.trainer', 'deepspeed'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(ROOT))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
