"""What a user sees on stderr: progress as whole lines in a pipe (no `\\r` redraws), and --quiet and
--verbose taken the same way by every command (the one list: `srpo_dsl.cli.main.COMMANDS`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import typer

from srpo_dsl import console
from srpo_dsl.cli.main import COMMANDS, app, main
from srpo_dsl.progress import SECONDS_ENV, progress
from tests.support.clitools import ROOT

SCRIPT = {
    "solver": ["\\boxed{4}", "\\boxed{5}", "\\boxed{4}"],
    "verifier": ["<verify>approve</verify>"],
    "aggregator": ["FINAL: \\boxed{4}", "FINAL: \\boxed{5}"],
}


@pytest.fixture(autouse=True)
def normal_level():
    yield
    console.set_level(console.NORMAL)  # what a command set stays in this process: not for the next test


def scripted(tmp_path: Path) -> list[str]:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(SCRIPT))
    return ["workflows/math_fixed.srpo", "--backend", "scripted", "--model", str(replies)]


def test_progress_in_a_pipe_is_a_line_per_tenth(tmp_path: Path) -> None:
    """`run` with stderr to a pipe: 40 episodes give a line at every 4th and none of tqdm's redraws."""
    env = os.environ | {SECONDS_ENV: "3600", "PYTHONPATH": str(ROOT)}  # lines by count, however slow
    args = ["run", *scripted(tmp_path), "--limit", "5", "--samples", "8", "--out", str(tmp_path / "r")]
    r = subprocess.run([sys.executable, "-m", "srpo_dsl", *args], cwd=ROOT, env=env, capture_output=True)
    stderr = r.stderr.decode()  # as bytes: text mode would turn each `\r` into a newline
    assert r.returncode == 0, stderr
    assert "\r" not in stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rollouts: ")]
    assert [line.split(",")[0] for line in lines] == [
        f"rollouts: {n}/40 episodes ({n * 100 // 40}%)" for n in range(4, 41, 4)
    ]


def test_progress_seconds_interval(monkeypatch, capfd) -> None:
    """SRPO_DSL_PROGRESS_SECONDS=0: a line per update; a value that is not a number is one clear error."""
    monkeypatch.setenv(SECONDS_ENV, "0")
    for _ in progress(range(25), desc="steps", unit="step"):
        pass
    err = capfd.readouterr().err
    assert err.count("\n") == 25 and err.splitlines()[-1].startswith("steps: 25/25 steps (100%), ")
    monkeypatch.setenv(SECONDS_ENV, "soon")
    with pytest.raises(Exception, match=f"{SECONDS_ENV}=soon: expected a number of seconds, 0 or more"):
        progress(range(3), desc="steps", unit="step")


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_takes_quiet_and_verbose(name: str) -> None:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    options = {p.name: set(p.opts) for p in command.params}
    assert options["quiet"] == {"--quiet", "-q"} and options["verbose"] == {"--verbose", "-v"}


def run_main(argv: list[str], capfd) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    out, err = capfd.readouterr()
    return ended.value.code, out, err


def cheap_commands(tmp_path: Path) -> dict[str, list[str]]:
    """A successful call of each command that needs no model, training run or editor and takes well under
    a second here (`eval` and `plot` take seconds: their --quiet is the same option, tested above)."""
    run = tmp_path / "r"
    return {
        "validate": ["workflows/quickstart.srpo"],
        "compile": ["workflows/math_fixed.srpo"],
        "fmt": ["--check", "workflows/quickstart.srpo"],
        "render": ["workflows/math_fixed.srpo", "--role", "solver"],
        "run": [*scripted(tmp_path), "--limit", "2", "--samples", "2", "--out", str(run), "--overwrite"],
        "audit": [str(run)],
        "view": [str(run), "-o", str(tmp_path / "v.html")],
    }


def test_quiet_prints_only_results(tmp_path: Path, capfd, monkeypatch) -> None:
    """Each cheap command, in order (`audit` and `view` read `run`'s folder): with --quiet nothing on
    stderr and the same stdout as without; with --verbose it still succeeds."""
    monkeypatch.chdir(ROOT)
    calls = cheap_commands(tmp_path)
    assert set(calls) <= set(COMMANDS)
    said = {}
    for name, args in calls.items():
        code, out, err = run_main([name, "--quiet", *args], capfd)
        assert (code, err) == (0, ""), (name, err)
        code, normal, said[name] = run_main([name, *args], capfd)
        assert code == 0 and normal == out, name
        assert run_main([name, "--verbose", *args], capfd)[0] == 0, name
    loud = {"validate", "compile", "fmt", "run"}  # summaries, progress: what --quiet hid
    assert {name for name, err in said.items() if err} >= loud


def test_quiet_and_verbose_together_is_a_usage_error(capfd) -> None:
    code, _, err = run_main(["validate", "-q", "-v", "workflows/quickstart.srpo"], capfd)
    assert (code, err) == (2, "error: --quiet and --verbose: give one of them\n")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpus_asked_for_on_a_machine_without_one_are_said_at_once() -> None:
    """`deepspeed --num_gpus 2` on a CPU machine sets CUDA_VISIBLE_DEVICES=0,1: the first line says what
    runs instead (here the dry run, without the launcher's minutes of loading)."""
    env = os.environ | {"PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "0,1"}
    command = [sys.executable, "-m", "srpo_dsl", "train", "workflows/quickstart.srpo", "--dry-run"]
    r = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("no GPU found (CUDA_VISIBLE_DEVICES=0,1): 1 process(es) train on the CPU")
