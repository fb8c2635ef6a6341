"""`srpo-dsl train` and `plot`: choices from one source, the held-out result line, the held-out
panel, and the libraries' output hidden unless --verbose."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from srpo_dsl import choices, devices, registries
from srpo_dsl.api.quiet import libraries_quiet
from srpo_dsl.api.runs import Run
from srpo_dsl.cli.common import CliError
from srpo_dsl.cli.train_cmds import (
    Device,
    Objective,
    Offload,
    SetNorm,
    heldout_summary,
    parse_options,
    report,
)
from srpo_dsl.errors import SrpoDslError
from srpo_dsl.runfolder import RoleSeries, RunError, eval_curve, read_dynamics, read_jsonl
from tests.support.clitools import cli
from tests.support.training import ONE_POLICY_TEAM, train_env

ROOT = Path(__file__).resolve().parents[2]
EVAL_ROWS = [  # first and last rows make the summary; the middle one must not
    {"step": 0, "avg_at_k": 0.3241, "pass_at_k": 0.758, "k": 4, "n_prompts": 128},
    {"step": 20, "avg_at_k": 0.9, "pass_at_k": 0.99, "k": 4, "n_prompts": 128},
    {"step": 100, "avg_at_k": 0.6704, "pass_at_k": 0.8828, "k": 4, "n_prompts": 128},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "srpo_dsl", *args], capture_output=True, text=True, cwd=ROOT, **kwargs
    )


# --- one source for every list of names ------------------------------------------------------


def test_choices_come_from_the_registries_and_the_names() -> None:
    from srpo_dsl.cli.run_cmds import BackendName
    from srpo_dsl.cli.train_cmds import RolloutEngine

    values = lambda enum: tuple(e.value for e in enum)  # noqa: E731
    assert values(Objective) == tuple(registries.OBJECTIVES) == ("srpo", "grpo", "seq", "drmas", "traj")
    assert values(SetNorm) == tuple(registries.SET_NORMS) == ("sqrt", "mean", "none")
    assert values(Offload) == choices.OFFLOAD
    assert values(Device) == devices.DEVICES
    assert values(BackendName) == tuple(registries.BACKENDS) == ("hf", "scripted", "vllm")
    assert values(RolloutEngine) == tuple(registries.ROLLOUT_ENGINES) == ("hf", "vllm")


def test_train_options_accept_exactly_the_names() -> None:
    from pydantic import ValidationError

    from srpo_dsl.lang.checks.schema import TrainOptions

    assert [TrainOptions(objective=n).objective for n in registries.OBJECTIVES] == list(registries.OBJECTIVES)
    assert [TrainOptions(set_norm=n).set_norm for n in registries.SET_NORMS] == list(registries.SET_NORMS)
    with pytest.raises(ValidationError, match="'srpo', 'grpo', 'seq', 'drmas' or 'traj'"):
        TrainOptions(objective="ppo")
    with pytest.raises(ValidationError, match="'sqrt', 'mean' or 'none'"):
        TrainOptions(set_norm="sum")
    assert tuple(registries.REWARDS) == ("math_equiv", "exact_match", "f1")


def test_names_and_schema_import_no_heavy_library() -> None:
    code = (
        "import sys, srpo_dsl.lang.checks.schema, srpo_dsl.registries, srpo_dsl.choices, srpo_dsl.cli.main\n"
        "print(sorted(m for m in ('torch', 'transformers', 'deepspeed', 'math_verify', 'sympy') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "[]", r.stderr


def test_an_unknown_choice_is_a_usage_error_listing_the_names() -> None:
    r = run_cli("train", "workflows/quickstart.srpo", "--objective", "ppo")
    assert r.returncode == 2
    assert "'ppo' is not one of 'srpo', 'grpo', 'seq', 'drmas', 'traj'" in " ".join(r.stderr.split())


# --- the held-out result line ------------------------------------------------------------------


def test_heldout_summary_from_the_first_and_last_rows(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "eval.jsonl", EVAL_ROWS)
    curve = eval_curve(read_jsonl(path), path)
    assert heldout_summary(curve, Path("runs/quickstart")) == (
        "held-out Avg@4 32.4% -> 67.0% (+34.6), Pass@4 75.8% -> 88.3% (+12.5) at steps 0 -> 100; "
        "plots: srpo-dsl plot runs/quickstart"
    )
    one = eval_curve(EVAL_ROWS[:1], path)
    assert heldout_summary(one, Path("my runs/a")) == (
        "held-out Avg@4 32.4%, Pass@4 75.8% at step 0; plots: srpo-dsl plot 'my runs/a'"
    )


def test_the_report_ends_with_the_heldout_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    history = [{"step": 100, "return": 0.61, "loss": -0.0123, "grad_norm": 0.456}]
    report(Run(tmp_path, history))  # no eval.jsonl: the step line only
    assert capsys.readouterr().out == f"step 100: return 0.610, grad norm 0.456 -> {tmp_path}\n"
    write_jsonl(tmp_path / "eval.jsonl", EVAL_ROWS)
    report(Run(tmp_path, []))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"nothing to do: {tmp_path} already reached its last step"
    assert lines[-1].startswith("held-out Avg@4 32.4% -> 67.0% (+34.6)")


@pytest.mark.parametrize("text", ['{"step": 0}\n', "{oops\n"])
def test_a_broken_eval_file_is_one_line(tmp_path: Path, text: str, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text(text)
    with pytest.raises(RunError) as err:
        eval_curve(read_jsonl(path), path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SrpoDslError) as cli_err:  # the end-of-run report says it in one line, exit 1
        report(Run(tmp_path, []))
    assert str(cli_err.value) == str(err.value) and cli_err.value.exit_code == 1


# --- plot ----------------------------------------------------------------------------------------


def png_width(path: Path) -> int:
    data = path.read_bytes()
    assert data[:4] == b"\x89PNG"
    return int.from_bytes(data[16:20], "big")  # IHDR width


def test_plot_adds_the_heldout_panel(tmp_path: Path) -> None:
    from srpo_dsl.cli.main import app

    metrics = [
        {"step": s, "return": s / 10, "grad_norm": 1.0, "response_length": 10, "mean_set_size": 1.5}
        for s in range(1, 11)
    ]
    write_jsonl(tmp_path / "metrics.jsonl", metrics)
    result = CliRunner().invoke(app, ["plot", str(tmp_path), "--out", str(tmp_path / "without")])
    assert result.exit_code == 0, result.output
    write_jsonl(tmp_path / "eval.jsonl", EVAL_ROWS)
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    plots = tmp_path / "plots"
    assert png_width(plots / "heldout.png") == 600  # 5 in at 120 dpi
    assert not (tmp_path / "without" / "heldout.png").exists()
    # one more panel, 5 in wide, in the combined figure
    assert (
        png_width(plots / "training_dynamics.png")
        == png_width(tmp_path / "without" / "training_dynamics.png") + 600
    )


def test_plot_adds_the_per_role_panels_when_logged(tmp_path: Path) -> None:
    from srpo_dsl.cli.main import app

    base = {"return": 0.5, "grad_norm": 1.0, "response_length": 10, "mean_set_size": 1.5}
    solver = {
        "role/solver/invalid_rate": 0.5,
        "role/solver/response_length": 8.0,
        "event/x/invalid_rate": 1.0,
    }
    judge = {"role/judge/invalid_rate": 0.1, "role/judge/response_length": 3.0}  # acts on odd steps only
    rows = [{"step": s, **base, **solver, **(judge if s % 2 else {})} for s in range(1, 7)]
    write_jsonl(tmp_path / "metrics.jsonl", rows)
    roles = read_dynamics(tmp_path).roles
    assert roles["invalid_rate"] == [
        RoleSeries("solver", [1, 2, 3, 4, 5, 6], [0.5] * 6),
        RoleSeries("judge", [1, 3, 5], [0.1] * 3),
    ]
    assert [s.values for s in roles["response_length"]] == [[8.0] * 6, [3.0] * 3]
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    plots = tmp_path / "plots"
    assert png_width(plots / "role_invalid_rate.png") == png_width(plots / "role_response_length.png") == 600
    assert png_width(plots / "training_dynamics.png") == 6 * 600  # 4 panels + 2 per-role panels
    write_jsonl(tmp_path / "metrics.jsonl", [{**rows[0], "role/judge/invalid_rate": "n/a"}])
    with pytest.raises(RunError, match="not a metrics file") as err:
        read_dynamics(tmp_path)
    assert "\n" not in str(err.value)
    result = CliRunner().invoke(app, ["plot", str(tmp_path)])  # `main` prints it as one line, exit 1
    assert isinstance(result.exception, SrpoDslError) and result.exception.exit_code == 1
    assert str(result.exception) == str(err.value)


# --- library output ------------------------------------------------------------------------------


def test_libraries_quiet_hides_logs_warnings_and_stdout_then_restores(capfd: pytest.CaptureFixture) -> None:
    libc = ctypes.CDLL(None)
    ds = logging.getLogger("DeepSpeed")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with libraries_quiet(True):
            print("python print")
            os.write(1, b"fd write\n")
            libc.printf(b"c printf\n")  # buffered in C stdio: dropped when the block ends
            sys.stderr.write("own progress\n")
            assert not ds.isEnabledFor(logging.WARNING) and ds.isEnabledFor(logging.ERROR)
            assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
            warnings.warn_explicit("library", UserWarning, "x.py", 1, module="transformers.modeling_utils")
            warnings.warn_explicit("user code", UserWarning, "y.py", 1, module="my_reward")
    libc.fflush(None)
    out, err = capfd.readouterr()
    assert out == "" and err == "own progress\n"
    assert [str(w.message) for w in shown] == ["user code"]
    print("after")
    assert capfd.readouterr().out == "after\n"
    assert ds.isEnabledFor(logging.WARNING) and "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ


@pytest.mark.slow
def test_train_shows_the_result_not_the_libraries(tmp_path: Path, tiny_random_model: Path) -> None:
    (tmp_path / "solver.j2").write_text("S {{ task.question }}=")
    (tmp_path / "aggregator.j2").write_text("A {{ task.question }}=")
    (tmp_path / "team.srpo").write_text(ONE_POLICY_TEAM)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    args = ["train", str(tmp_path / "team.srpo"), "--model", str(tiny_random_model), "--device", "cpu"]
    quiet = run_cli(*args, "--out", str(tmp_path / "quiet"), env=env, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    lines = quiet.stdout.splitlines()
    assert (
        len(lines) == 2 and lines[0].startswith("step 1: return") and lines[1].startswith("held-out Avg@2 ")
    )
    assert (
        "Loading weights" not in quiet.stderr and "WARNING" not in quiet.stderr and "train:" in quiet.stderr
    )
    verbose = run_cli(*args, "--out", str(tmp_path / "verbose"), "--verbose", env=env, timeout=300)
    assert verbose.returncode == 0, verbose.stderr[-2000:]
    assert "Loading weights" in verbose.stderr and verbose.stdout.splitlines()[-1].startswith("held-out")


def test_option_pairs_are_parsed_and_checked_by_the_trainer(tmp_path):
    assert parse_options(["clip=0.1", " eval_size = 64 "]) == {"clip": "0.1", "eval_size": "64"}
    with pytest.raises(CliError, match="--option clip: expected NAME=VALUE"):
        parse_options(["clip"])
    result = cli(
        "train",
        "workflows/quickstart.srpo",
        "--out",
        tmp_path / "r",
        "--option",
        "clipp=0.1",
        env=train_env(),
    )
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: --option clipp=0.1: no training option `clipp` (did you mean `clip`?)"
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args", [["--lr", "inf"], ["--option", "lr=nan"], ["--option", "clip=inf"]])
def test_a_non_finite_option_is_refused_before_anything_is_written(tmp_path, args):
    # `--lr inf` trained on to `grad norm nan` and exported NaN weights with exit 0 (issue 38).
    result = cli("train", "workflows/quickstart.srpo", "--out", tmp_path / "r", *args, env=train_env())
    name = args[1].split("=")[0] if args[0] == "--option" else "lr"
    assert result.returncode != 0 and result.stderr.strip() == (
        f"error: training option `{name}`: Input should be a finite number"
    )
    assert not (tmp_path / "r").exists()


def test_a_non_finite_option_in_the_workflow_is_a_positioned_error(tmp_path):
    import shutil

    workflows = Path(__file__).resolve().parents[2] / "workflows"
    text = (workflows / "quickstart.srpo").read_text().replace("lr = 4e-4", "lr = inf")
    assert "lr = inf" in text
    shutil.copytree(workflows / "quickstart", tmp_path / "quickstart")  # its templates, beside it
    (tmp_path / "q.srpo").write_text(text)
    result = cli("validate", tmp_path / "q.srpo")
    assert result.returncode == 1 and "error[E024]: train: `lr` must be a finite number" in result.stdout


@pytest.mark.slow
def test_resume_compares_the_config_both_ways_with_paths_resolved(
    tmp_path: Path, tiny_random_model: Path
) -> None:
    """A run trained with `--eval-data` may not resume without it (a key removed is a change too), while
    the same workflow and held-out file named `./team.srpo` and `./held.jsonl` instead of `team.srpo` and
    `held.jsonl` resume it."""
    from srpo_dsl.envs.arith import make_arith_tasks

    (tmp_path / "solver.j2").write_text("S {{ task.question }}=")
    (tmp_path / "aggregator.j2").write_text("A {{ task.question }}=")
    (tmp_path / "team.srpo").write_text(ONE_POLICY_TEAM)
    write_jsonl(tmp_path / "held.jsonl", make_arith_tasks(3, 7, 9, heldout=True))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}

    def train(workflow: str, *flags: str) -> subprocess.CompletedProcess:
        args = [workflow, "--out", "run", "--model", str(tiny_random_model), "--device", "cpu", *flags]
        return subprocess.run(
            [sys.executable, "-m", "srpo_dsl", "train", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )

    first = train("team.srpo", "--eval-data", "held.jsonl")
    assert first.returncode == 0, first.stderr[-2000:]
    dropped = train("team.srpo", "--resume", "--steps", "2")
    held = json.dumps([str(tmp_path / "held.jsonl")])
    assert dropped.returncode == 2 and dropped.stderr == (
        "error: cannot resume run/checkpoints/step-1: changed since it was written: "
        f"eval_data was {held}, now not given\n"
    )
    resumed = train("./team.srpo", "--resume", "--steps", "2", "--eval-data", "./held.jsonl")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [1, 2]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["eval_data"] == [
        str(tmp_path / "held.jsonl")
    ]
