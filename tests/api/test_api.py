"""srpo-dsl from Python (`srpo_dsl.load`, `Workflow.run/evaluate/train`): the same guarantees as the CLI.

`load` never imports the user's code; failures raise typed exceptions (the diagnostics, the user's
file:line, usage errors) and never print; training twice in one process works and leaves no process
group, engine or thread behind.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

import srpo_dsl
from srpo_dsl.api import (
    Evaluation,
    InputError,
    Rollouts,
    Run,
    SrpoDslError,
    UsageError,
    UserCodeError,
    Workflow,
    WorkflowError,
)
from srpo_dsl.runtime.traces import TraceEpisode

ROOT = Path(__file__).resolve().parents[2]
MARKER = "imported.txt"
TINY = {"steps": 2, "batch": 2, "group": 2, "eval_every": 2, "eval_size": 4, "save_every": 2}


@pytest.fixture
def tools_workflow(tmp_path: Path) -> Path:
    """quickstart_tools with a calculator module that notes, in a file, that it was imported."""
    shutil.copytree(ROOT / "workflows" / "quickstart_tools", tmp_path / "quickstart_tools")
    calc = tmp_path / "quickstart_tools" / "calc.py"
    calc.write_text(calc.read_text() + f"\nopen({str(tmp_path / MARKER)!r}, 'w').close()\n")
    return Path(shutil.copy(ROOT / "workflows" / "quickstart_tools.srpo", tmp_path))


def test_the_api_is_reachable_from_the_package_and_import_is_light() -> None:
    assert srpo_dsl.load is srpo_dsl.api.load and srpo_dsl.Run is Run
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        srpo_dsl.nothing  # noqa: B018


def test_load_inspects_without_importing_the_user_s_code(tools_workflow: Path) -> None:
    wf = srpo_dsl.load(tools_workflow)
    assert isinstance(wf, Workflow) and wf.name == "quickstart_tools" and wf.diagnostics == ()
    assert (wf.bounds.events, wf.bounds.tool_calls) == (4, 3)  # 3 turns + the forced answer; a call each
    g = wf.to_networkx()
    assert g.graph["hash"] == wf.graph.hash and g.graph["max_events"] == wf.bounds.events
    assert {"calc"} == set(g.graph["tools"]) and g.number_of_nodes() == len(wf.graph.nodes)
    assert not (tools_workflow.parent / MARKER).exists()
    calc = str(tools_workflow.parent / "quickstart_tools" / "calc.py")
    assert not any(getattr(m, "__file__", None) == calc for m in list(sys.modules.values()))


def test_a_broken_workflow_raises_its_diagnostics_and_prints_nothing(tmp_path: Path, capfd) -> None:
    shutil.copytree(ROOT / "workflows" / "quickstart", tmp_path / "quickstart")
    path = tmp_path / "broken.srpo"
    text = (ROOT / "workflows" / "quickstart.srpo").read_text().replace("parallel solver", "parallel solvers")
    path.write_text(text)
    line = text.splitlines().index(next(x for x in text.splitlines() if x.startswith("parallel solvers"))) + 1
    with pytest.raises(WorkflowError) as err:
        srpo_dsl.load(path)
    assert str(err.value).startswith(f"{path}:{line}:10: error[E012]") and err.value.exit_code == 1
    codes = {d.code for d in err.value.diagnostics}
    assert "E012" in codes and all(d.span.file == str(path) for d in err.value.diagnostics)
    assert "parallel solvers" in err.value.render() and "^^^^^^^" in err.value.render()
    with pytest.raises(UsageError, match="no such file") as missing:
        srpo_dsl.load(tmp_path / "absent.srpo")
    assert missing.value.exit_code == 2
    assert capfd.readouterr() == ("", "")


def test_run_returns_event_traces_and_imports_the_user_s_code(tools_workflow: Path, tmp_path: Path) -> None:
    wf = srpo_dsl.load(tools_workflow)
    rollouts = wf.run(limit=4, samples=2, seed=3, progress=False)
    assert (tools_workflow.parent / MARKER).exists()  # running is what imports the tool
    assert isinstance(rollouts, Rollouts) and len(rollouts.episodes) == 8
    assert all(isinstance(ep, TraceEpisode) and ep.events for ep in rollouts.episodes)
    assert [ep.episode_id for ep in rollouts.episodes[:2]] == [
        f"{rollouts.episodes[0].prompt_id}/0",
        f"{rollouts.episodes[0].prompt_id}/1",
    ]
    s = rollouts.summary
    assert s.episodes == 8 and s.events == sum(len(ep.events) for ep in rollouts.episodes)
    assert s.mean_set_size == 1.0  # one agent: every event has K = 1
    again = wf.run(limit=4, samples=2, seed=3, progress=False)
    assert [ep.model_dump() for ep in again.episodes] == [ep.model_dump() for ep in rollouts.episodes]
    out = rollouts.save(tmp_path / "r")
    assert {p.name for p in out.iterdir()} == {"traces.jsonl", "summary.json", "graph.json"}
    with pytest.raises(UsageError, match="already exists"):
        rollouts.save(tmp_path / "r")


def test_a_user_code_error_names_the_user_s_file_and_line(tools_workflow: Path) -> None:
    calc = tools_workflow.parent / "quickstart_tools" / "calc.py"
    calc.write_text(calc.read_text() + "\nraise RuntimeError('no calculator today')\n")
    line = len(calc.read_text().splitlines())
    wf = srpo_dsl.load(tools_workflow)  # loading reads it, does not run it
    with pytest.raises(UserCodeError) as err:
        wf.run(limit=1, progress=False)
    assert (Path(err.value.file).name, err.value.line) == ("calc.py", line)
    assert str(err.value).endswith("importing it failed: RuntimeError: no calculator today")
    assert isinstance(err.value, InputError) and err.value.exit_code == 1


def test_usage_errors_come_before_anything_loads(tmp_path: Path) -> None:
    wf = srpo_dsl.load(ROOT / "workflows" / "quickstart.srpo")
    cases = [
        (lambda: wf.run(models={"nope": "x"}), "no policy `nope`"),
        (lambda: wf.run(device="tpu"), "device 'tpu'"),
        (lambda: wf.run(backend="nope"), "backend 'nope'"),
        (lambda: wf.run(backend="scripted"), "needs its reply script"),
        (lambda: wf.run(data=tmp_path / "absent.jsonl"), "no such file"),
        (lambda: wf.evaluate(k=0), "at least 1"),
        (lambda: wf.train(tmp_path / "t", clipp=0.1), "no training option `clipp` (did you mean `clip`?)"),
    ]
    for call, message in cases:
        with pytest.raises(UsageError) as err:
            call()
        assert message in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    with pytest.raises(UsageError, match=r"already exists .*pass --resume"):
        wf.train(tmp_path / "taken", steps=1)
    assert issubclass(WorkflowError, SrpoDslError) and issubclass(UserCodeError, SrpoDslError)


def test_evaluate_returns_per_dataset_metrics_and_the_table() -> None:
    wf = srpo_dsl.load(ROOT / "workflows" / "quickstart.srpo")
    ev = wf.evaluate(k=2, limit=4, progress=False)
    assert isinstance(ev, Evaluation) and ev.k == 2 and len(ev.episodes) == 8
    (row,) = ev.datasets
    assert (row.name, row.queries, row.k) == ("quickstart", 4, 2)
    assert 0 <= row.avg_at_k <= row.pass_at_k <= 1 and (ev.avg_at_k, ev.pass_at_k) == (
        row.avg_at_k,
        row.pass_at_k,
    )
    assert set(row.invalid_rate) == {"solver", "verifier", "aggregator"} and ev.roles == tuple(
        row.invalid_rate
    )
    assert ev.to_dict()["macro"] == {"avg_at_k": ev.avg_at_k, "pass_at_k": ev.pass_at_k}
    assert (
        "| quickstart | 4 |" in ev.table() and "Avg@2" in ev.table() and "invalid outputs (%)" in ev.table()
    )


def live_engines() -> int:
    import deepspeed

    gc.collect()
    return sum(isinstance(o, deepspeed.DeepSpeedEngine) for o in gc.get_objects())


def test_train_twice_in_one_process_leaves_nothing_behind(tmp_path: Path) -> None:
    import torch.distributed

    from srpo_dsl.launched import LAUNCH_VARIABLES
    from srpo_dsl.rl.distributed.process_group import destroy_distributed

    destroy_distributed()  # what an earlier test in this process left (the trainer's own group)
    for key in LAUNCH_VARIABLES:
        os.environ.pop(key, None)
    wf = srpo_dsl.load(ROOT / "workflows" / "quickstart.srpo")
    threads, engines = {t.ident for t in threading.enumerate()}, live_engines()  # earlier tests' own
    runs = [wf.train(tmp_path / f"run{i}", progress=False, **TINY) for i in range(2)]
    for run in runs:
        assert isinstance(run, Run) and [r["step"] for r in run.history] == [1, 2]
        assert run.metrics == run.history and [p.name for p in run.checkpoints] == ["step-2"]
        assert run.curve is not None and run.curve.steps == [0, 2]
    keys = ("return", "loss", "grad_norm")
    assert [[r[k] for k in keys] for r in runs[0].history] == [[r[k] for k in keys] for r in runs[1].history]
    assert (
        not torch.distributed.is_initialized()
        and "RANK" not in os.environ
        and "MASTER_PORT" not in os.environ
    )
    assert live_engines() == engines  # none of the two runs' engines lives on
    assert all(t.daemon or t.ident in threads for t in threading.enumerate())
    opened = Run.open(tmp_path / "run0")
    assert opened.history == [] and opened.metrics == runs[0].metrics
    resumed = wf.train(tmp_path / "run0", resume=True, progress=False, **{**TINY, "steps": 3})
    assert [r["step"] for r in resumed.history] == [3] and len(resumed.metrics) == 3
    with pytest.raises(UsageError, match=r"is .* a training run"):
        Run.open(tmp_path)


def loud_quickstart(folder: Path) -> Path:
    """The quickstart with a reward of the user's own that prints."""
    shutil.copytree(ROOT / "workflows" / "quickstart", folder / "quickstart")
    (folder / "loud.py").write_text(
        "def reward(answer, row):\n    print('loud reward', flush=True)\n    return 0.0\n"
    )
    text = (ROOT / "workflows" / "quickstart.srpo").read_text()
    text = text.replace("reward exact_match(aggregator, task.answer)", 'reward "loud.py:reward"(aggregator)')
    (folder / "loud.srpo").write_text(text)
    return folder / "loud.srpo"


@pytest.mark.distributed
@pytest.mark.slow
def test_train_with_rollout_workers_runs_as_processes_and_returns_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A run with workers is processes; what they write reaches `sys.stdout` and `sys.stderr`, the objects
    a notebook shows (a user's print in a reward: on stderr, the progress, the summary); its error line is the message."""
    wf = srpo_dsl.load(loud_quickstart(tmp_path))
    run = wf.train(tmp_path / "async", rollout_workers=1, max_staleness=1, **TINY)
    assert [r["step"] for r in run.history] == [1, 2] and run.metrics == run.history
    assert all(r["async/workers"] == 1 for r in run.history)
    out, err = capsys.readouterr()
    assert "loud reward\n" in err and "train: 2/2 steps (100%)" in err and "step 2: return" in out
    wf.train(tmp_path / "quiet", rollout_workers=1, progress=False, **{**TINY, "steps": 1})
    out, err = capsys.readouterr()
    assert "loud reward\n" in err and "train: " not in err and "step 1: return" in out  # no progress lines
    with pytest.raises(InputError) as err:  # the processes' own error line is the message
        wf.train(tmp_path / "bad", rollout_workers=1, models={"lm": str(tmp_path / "absent")}, **TINY)
    message = str(err.value)
    assert message.startswith("training in 2 processes (`srpo-dsl train`) failed: ") and "absent" in message
    assert "\n" not in message and not (tmp_path / "bad" / "metrics.jsonl").exists()
    assert f"error: {message.split('failed: ')[1]}" in capsys.readouterr().err
