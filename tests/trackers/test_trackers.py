"""The trackers of `train with (report_to = ...)`, for real: MLflow against an `mlflow server` on loopback
with a SQLite store (started here, once for the module), W&B in offline mode (its run file read back),
TensorBoard's event files; several at once, a resumed run, a sweep's cells in one experiment, a server
that is down, a tracker that is not installed or fails midway."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from pydantic import ValidationError

from srpo_dsl.lang import analyze
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.registries import TRACKERS, TrackerKind
from srpo_dsl.rl.distributed.process_group import free_port
from srpo_dsl.runfolder import read_jsonl
from srpo_dsl.sweep.experiment import tomllib  # tomli before Python 3.11
from srpo_dsl.trackers.base import TrackedRun, Tracker, tracked_metrics
from srpo_dsl.trackers.fanout import Trackers, start_tracker
from tests.support.clitools import ROOT, cli
from tests.support.training import ONE_POLICY_TEAM, train_env

mlflow = pytest.importorskip("mlflow")
wandb = pytest.importorskip("wandb")


# --- a real MLflow server, the workflow, a run ----------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory):
    """`mlflow server` with a SQLite store on a free loopback port, answering; stopped at the end."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{folder}/db.sqlite",
    ]
    command += [
        "--artifacts-destination",
        str(folder / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with (folder / "server.log").open("w") as log:
        server = subprocess.Popen(
            [*command, "--workers", "1"],
            env=os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},  # no job runner, no consumers
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{uri}/health", server, folder / "server.log")
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGKILL)  # the server and its workers; its store is a temporary file
        server.wait(timeout=30)


def wait_for(url: str, server: subprocess.Popen, log: Path, limit: float = 120.0) -> None:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        assert server.poll() is None, log.read_text()[-2000:]
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"mlflow server did not answer in {limit} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("team")
    (folder / "solver.j2").write_text("S {{ task.question }}=")
    (folder / "aggregator.j2").write_text("A {{ task.question }}=")
    (folder / "team.srpo").write_text(ONE_POLICY_TEAM)
    return folder / "team.srpo"


def train(
    workflow: Path, model: Path, out: Path, env: dict[str, str], *flags: str
) -> subprocess.CompletedProcess:
    args = ["train", workflow, "--model", model, "--device", "cpu", "--out", out, "--option", "eval_every=1"]
    return cli(*args, *flags, env=train_env() | env, timeout=300)


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def mlflow_history(uri: str, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in client(uri).get_metric_history(run_id, key)}


def expected(out: Path) -> dict[str, dict[int, float]]:
    """Every tracked key of the run's metrics.jsonl and eval.jsonl -> its value at each step."""
    series: dict[str, dict[int, float]] = {}
    for name, prefix in (("metrics.jsonl", "train"), ("eval.jsonl", "eval")):
        for row in read_jsonl(out / name):
            for key, value in tracked_metrics(row, prefix).items():
                series.setdefault(key, {})[row["step"]] = value
    return series


# --- W&B's offline run file ------------------------------------------------------------------------

BLOCK = 32 * 1024  # W&B's run file: LevelDB's log format, 32 KiB blocks of records, after a 7-byte header


def wandb_records(path: Path):
    """The protobuf records of an offline run's `run-ID.wandb` (W&B 0.31 ships no Python reader)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, chunk = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:  # the padding at a block's end
            pos += left
            continue
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or a record's last part
            record = pb.Record()
            record.ParseFromString(chunk)
            chunk = b""
            yield record


def wandb_run(folder: Path, run_id: str) -> dict:
    """An offline run's history (step -> {key: value}), run record and saved files, from its run files
    (a resumed run has one folder per part)."""
    history: dict[int, dict[str, float]] = {}
    out: dict = {"history": history, "files": set()}
    for path in sorted(folder.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")):
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = {
                    i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item
                }
                history.setdefault(int(items["_step"]), {}).update(items)
            elif kind == "run":
                out["run"] = record.run
            elif kind == "files":
                out["files"] |= {f.path for f in record.files.files}
    return out


# --- the option -------------------------------------------------------------------------------------


def test_report_to_takes_registered_names_several_or_none() -> None:
    assert TrainOptions().report_to == "tensorboard" and TrainOptions().trackers == ("tensorboard",)
    assert TrainOptions(report_to=" mlflow , wandb,mlflow").trackers == ("mlflow", "wandb")
    assert TrainOptions(report_to=["wandb", "tensorboard"]).report_to == "wandb,tensorboard"  # the Python API
    assert TrainOptions(report_to="none").trackers == ()
    with pytest.raises(ValidationError, match="'tensorboard', 'wandb', 'mlflow', several joined by commas"):
        TrainOptions(report_to="wandb,neptune")
    with pytest.raises(ValidationError, match="'none' reports to no tracker: name it alone"):
        TrainOptions(report_to="none,wandb")


def test_report_to_in_a_workflow_is_checked_at_its_position(workflow: Path) -> None:
    text = workflow.read_text().replace("save_every = 5)", 'save_every = 5, report_to = "wandb,mlflow")')
    assert not [d for d in analyze(text, str(workflow)).diagnostics if d.severity == "error"]
    bad = workflow.read_text().replace("save_every = 5)", "save_every = 5, report_to = comet)")
    (error,) = [d for d in analyze(bad, str(workflow)).diagnostics if d.severity == "error"]
    assert error.code == "E024" and "got 'comet'" in error.message
    assert bad.splitlines()[error.span.line - 1][error.span.col - 1 :].startswith("report_to = comet")


def test_a_bad_report_to_on_the_command_line_is_one_line(
    workflow: Path, tiny_random_model: Path, tmp_path
) -> None:
    r = train(workflow, tiny_random_model, tmp_path / "run", {}, "--option", "report_to=comet")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("error: ")
    assert "got 'comet'" in r.stderr and not (tmp_path / "run").exists()


def test_the_python_api_takes_a_list_and_a_launch_passes_it_on(
    workflow: Path, tiny_random_model: Path, tmp_path
) -> None:
    import srpo_dsl
    from srpo_dsl.rl.loop.plan_io import plan_from_json, plan_json

    wf = srpo_dsl.load(workflow)
    plan = wf.plan(
        tmp_path / "run", models=str(tiny_random_model), report_to=["wandb", "mlflow"], rollout_workers=1
    )
    assert plan.opts.trackers == ("wandb", "mlflow")
    read_back = plan_from_json(plan_json(plan), tmp_path)  # as the launch reads it
    assert read_back.opts.trackers == ("wandb", "mlflow")


def test_the_extras_install_what_the_trackers_need() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, packages in (("wandb", ["wandb"]), ("mlflow", ["mlflow-skinny", "sqlalchemy", "alembic"])):
        kind = TRACKERS[name]
        assert kind.install == f"pip install 'srpo-dsl[{name}]'"
        assert [r.split(">")[0] for r in extras[name]] == packages
        assert importlib.util.find_spec(kind.needs_package) is not None  # the module the first one installs
    suite = re.search(r'constraints/cpu\.txt "\.\[([a-z,]+)\]"', (ROOT / ".ci" / "run").read_text())
    assert {"test", "wandb", "mlflow"} <= set(suite.group(1).split(","))  # CI installs what their tests run


def test_the_mlflow_extra_leaves_pyarrow_and_python_dateutil_at_their_newest() -> None:
    """The `mlflow` package (MLflow's server) caps pyarrow (<26) and, through graphene, python-dateutil
    (<3): the extra installs the client (`mlflow-skinny`, no caps on either) and the SQLite store's two
    packages instead, which is all a run reporting to MLflow imports (docs/training.md)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = [re.match(r"[A-Za-z0-9_.-]+", requirement).group() for requirement in extras["mlflow"]]
    assert "mlflow" not in names and "pyarrow" not in names and "python-dateutil" not in names
    from importlib.metadata import requires

    for package in names:
        capped = [
            r
            for r in requires(package) or []
            if "extra ==" not in r and r.startswith(("pyarrow", "python-dateutil"))
        ]
        assert capped == [], (package, capped)


# --- failing trackers ---------------------------------------------------------------------------------


class Recorder(Tracker):
    """A tracker a plugin registers: keeps what it is given; `fails_at`: raises when given that step."""

    logged: list[tuple[int, dict]]
    fails_at: int | None = None

    def __init__(self, run: TrackedRun):
        self.logged, self.finished = [], None
        type(self).last = self

    def log(self, metrics, step) -> None:
        if step == self.fails_at:
            raise ConnectionError("the server went away\nafter a while")
        self.logged.append((step, dict(metrics)))

    def finish(self, failed: bool) -> None:
        self.finished = failed


class Failing(Recorder):
    fails_at = 2


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch):
    for name, kind in {
        "recorder": TrackerKind(Recorder),
        "failing": TrackerKind(Failing),
        "absent": TrackerKind(Recorder, "srpo_dsl_absent_tracker", "pip install absent-tracker"),
    }.items():
        monkeypatch.setitem(TRACKERS, name, kind)


def tracked(tmp_path: Path) -> TrackedRun:
    return TrackedRun(tmp_path, "run", "team", {"options": {"lr": 1e-3}}, 0, None)


def test_a_tracker_not_installed_is_one_warning_and_the_others_start(plugins, tmp_path, capsys) -> None:
    trackers = Trackers(["absent", "recorder"], tracked(tmp_path))
    assert list(trackers.active) == ["recorder"]
    assert capsys.readouterr().err == (
        "warning: report_to absent: srpo_dsl_absent_tracker is not installed (pip install absent-tracker); "
        "the run goes on without it\n"
    )


def test_a_tracker_failing_midway_is_one_warning_and_dropped(plugins, tmp_path, capsys) -> None:
    trackers = Trackers(["failing", "recorder"], tracked(tmp_path))
    for step in (1, 2, 3):
        trackers.log({"train/return": step / 10}, step)
    trackers.finish()
    err = capsys.readouterr().err
    assert err == (
        "warning: report_to failing: failed (ConnectionError: the server went away after a while); "
        "the run goes on without it\n"
    )
    assert [s for s, _ in Failing.last.logged] == [1] and Failing.last.finished is None  # not called again
    assert (
        Recorder.last.logged == [(s, {"train/return": s / 10}) for s in (1, 2, 3)]
        and Recorder.last.finished is False
    )


def test_mlflow_against_a_closed_port_gives_up_in_seconds(tmp_path, capsys, monkeypatch) -> None:
    from srpo_dsl.trackers.mlflow import HTTP_DEFAULTS

    for key in HTTP_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    assert start_tracker("mlflow", tracked(tmp_path)) is None
    assert time.monotonic() - started < 30  # MLflow's own retries (7, backing off) take minutes
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "warning: report_to mlflow: cannot start (MlflowException: API request to http://127.0.0.1:"
    )
    assert line.endswith("; the run goes on without it")


@pytest.mark.slow
def test_a_server_that_is_down_leaves_a_complete_run(
    workflow: Path, tiny_random_model: Path, tmp_path
) -> None:
    env = {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}"}
    r = train(workflow, tiny_random_model, tmp_path / "run", env, "--option", "report_to=mlflow,tensorboard")
    assert r.returncode == 0, r.stderr[-2000:]
    (line,) = [x for x in r.stderr.replace("\r", "\n").splitlines() if "warning" in x.lower()]
    assert line.startswith("warning: report_to mlflow: cannot start (")
    assert [row["step"] for row in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1]
    assert [row["step"] for row in read_jsonl(tmp_path / "run" / "eval.jsonl")] == [0, 1]
    assert list((tmp_path / "run" / "tb").iterdir()) and not (tmp_path / "run" / "trackers.json").exists()


# --- every metric, the config, the graph and the plots; resumed -----------------------------------------


def check_mlflow(uri: str, out: Path, run_id: str) -> None:
    """Every metric of metrics.jsonl and eval.jsonl at its steps, the options as params, the config, the
    graph and the plots as artifacts."""
    run = client(uri).get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    for key, values in expected(out).items():
        assert mlflow_history(uri, run_id, key) == pytest.approx(values), key
    config = json.loads((out / "config.json").read_text())
    assert run.data.params["options.report_to"] == config["options"]["report_to"]
    assert float(run.data.params["options.lr"]) == config["options"]["lr"]
    assert run.data.params["workflow"] == config["workflow"]
    files = {a.path for a in client(uri).list_artifacts(run_id)}
    assert {"config.json", "graph.mmd", "plots"} <= files
    plots = {a.path for a in client(uri).list_artifacts(run_id, "plots")}
    assert {"plots/training_dynamics.png", "plots/heldout.png", "plots/return.png"} <= plots
    mermaid = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="graph.mmd", tracking_uri=uri)
    assert Path(mermaid).read_text() == (out / "graph.mmd").read_text()
    assert (out / "graph.mmd").read_text().startswith("flowchart")


def check_wandb(folder: Path, out: Path, run_id: str) -> None:
    found = wandb_run(folder, run_id)
    for key, values in expected(out).items():
        logged = {step: row[key] for step, row in found["history"].items() if key in row}
        assert logged == pytest.approx(values), key
    run = found["run"]
    assert (run.run_group, run.display_name, run.project) == ("team", "run", "srpo-dsl")
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert (
        config["options"]["report_to"]
        == json.loads((out / "config.json").read_text())["options"]["report_to"]
    )
    assert {"config.json", "graph.mmd", "plots/training_dynamics.png", "plots/heldout.png"} <= found["files"]


@pytest.mark.slow
def test_every_metric_reaches_each_tracker_and_a_resume_continues_their_runs(
    mlflow_uri: str, workflow: Path, tiny_random_model: Path, tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    env = {"MLFLOW_TRACKING_URI": mlflow_uri, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path)}
    out, trackers = tmp_path / "run", ["--option", "report_to=tensorboard,wandb,mlflow"]
    first = train(workflow, tiny_random_model, out, env, *trackers, "--steps", "2")
    assert first.returncode == 0 and "warning" not in first.stderr.lower(), first.stderr[-2000:]
    ids = json.loads((out / "trackers.json").read_text())
    assert set(ids) == {"wandb", "mlflow"}
    check_mlflow(mlflow_uri, out, ids["mlflow"])
    check_wandb(tmp_path, out, ids["wandb"])
    tb = EventAccumulator(str(out / "tb"))
    tb.Reload()
    assert set(expected(out)) == set(tb.Tags()["scalars"])
    (experiment,) = [e for e in client(mlflow_uri).search_experiments() if e.name == "team"]

    resumed = train(workflow, tiny_random_model, out, env, *trackers, "--steps", "3", "--resume")
    assert resumed.returncode == 0 and "warning" not in resumed.stderr.lower(), resumed.stderr[-2000:]
    assert json.loads((out / "trackers.json").read_text()) == ids  # the same tracker runs, continued
    assert [r.info.run_id for r in client(mlflow_uri).search_runs([experiment.experiment_id])] == [
        ids["mlflow"]
    ]
    assert set(mlflow_history(mlflow_uri, ids["mlflow"], "train/return")) == {1, 2, 3}
    check_mlflow(mlflow_uri, out, ids["mlflow"])
    check_wandb(tmp_path, out, ids["wandb"])


@pytest.mark.slow
def test_a_sweeps_cells_land_in_one_mlflow_experiment(
    mlflow_uri: str, workflow: Path, tiny_random_model: Path, tmp_path: Path
) -> None:
    experiment = tmp_path / "tracked_sweep.toml"
    cells = "".join(
        f'[[cell]]\nname = "{n}"\nworkflow = "{workflow}"\nlr = {lr}\n'
        for n, lr in (("a", 1e-3), ("b", 1e-2))
    )
    experiment.write_text(f'seeds = [1]\n[eval]\nevery = 1\n[train]\nreport_to = "mlflow"\n{cells}')
    env = train_env() | {"MLFLOW_TRACKING_URI": mlflow_uri}
    r = cli(
        "sweep",
        experiment,
        "--out",
        tmp_path / "sweep",
        "--model",
        tiny_random_model,
        "--jobs",
        "2",
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (found,) = [e for e in client(mlflow_uri).search_experiments() if e.name == "tracked_sweep"]
    runs = {run.info.run_name: run for run in client(mlflow_uri).search_runs([found.experiment_id])}
    assert set(runs) == {"a/seed-1", "b/seed-1"}
    for cell, lr in (("a", 1e-3), ("b", 1e-2)):
        run, out = runs[f"{cell}/seed-1"], tmp_path / "sweep" / "cells" / cell / "seed-1"
        assert run.info.status == "FINISHED" and float(run.data.params["options.lr"]) == lr
        assert mlflow_history(mlflow_uri, run.info.run_id, "train/return") == pytest.approx(
            expected(out)["train/return"]
        )
