"""A disk that refuses the results (a read-only mount, a full one) is one line naming what could not be
written and why, exit code 2 (docs/cli.md), and leaves no temporary file or folder behind: `run`, `plot`
and `train`. Real mounts (tmpfs): `chmod` does not stop root, who runs the tests here and in CI."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.clitools import cli
from tests.support.training import train_env

WORKFLOW = (
    "workflow w\n"
    'policy lm = builtin("tiny") with (temperature = 1.0)\n'
    "task arith(n = 20, eval_n = 4)\n"
    'agent a uses lm prompt "a.j2" emits boxed with (max_tokens = 4)\n'
    "aggregate a\n"
    "reward exact_match(a, task.answer)\n"
    "train with (group = 2, batch = 4, steps = 2, eval_every = 10, eval_size = 2, save_every = 1)\n"
)


def _mount(folder: Path, options: str) -> Path:
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (mount: {done.stderr.strip()}): needs root")
    return folder


@pytest.fixture
def disks(tmp_path):
    """(read-only, full): a read-only tmpfs, and a 64 KiB one that a checkpoint or many traces fill."""
    mounted = []
    try:
        for name, options in (("ro", "size=1m,ro"), ("full", "size=64k")):
            mounted.append(_mount(tmp_path / name, options))
        yield tuple(mounted)
    finally:
        for folder in mounted:
            subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def workflow(tmp_path):
    (tmp_path / "a.j2").write_text("{{ task.question }}")
    (tmp_path / "w.srpo").write_text(WORKFLOW)
    (tmp_path / "r.json").write_text(json.dumps({"a": ["\\boxed{1}"]}))
    return tmp_path / "w.srpo"


def _left(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_run_on_a_read_only_or_full_disk(disks, workflow):
    ro, full = disks
    # a model not on this machine: the scripted backend counts bytes, no tokenizer loads
    workflow.write_text(WORKFLOW.replace('builtin("tiny")', 'hf("srpo-dsl-tests/not-here")'))
    (workflow.parent / "a.j2").write_text("{{ task.question }} {{ 'padding ' * 2000 }}")  # 16 KB a prompt
    args = ("--backend", "scripted", "--model", workflow.parent / "r.json", "--limit", "1")
    refused = cli("run", workflow, *args, "--out", ro / "out")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines()[-1].endswith(
        f"error: cannot write {ro / 'out'}: Read-only file system"
    )
    filled = cli("run", workflow, *args, "--samples", "8", "--out", full / "out")  # >128 KB of traces
    assert filled.returncode == 2, filled.stderr
    assert filled.stderr.splitlines()[-1].endswith(
        f"error: cannot write {full / 'out'}: No space left on device"
    )
    assert _left(full) == []  # the staged folder is gone


def test_plot_on_a_read_only_disk(disks, tmp_path):
    ro, _ = disks
    rows = [
        {"step": s, "return": 0.5, "grad_norm": 1.0, "response_length": 10, "mean_set_size": 1}
        for s in (1, 2)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plotted = cli("plot", tmp_path, "--out", ro / "plots")
    assert (
        plotted.returncode == 2
        and plotted.stderr == f"error: cannot write {ro / 'plots'}: Read-only file system\n"
    )


@pytest.mark.slow
def test_train_on_a_read_only_or_full_disk(disks, workflow):
    """A full disk fails the first checkpoint (the tiny model's 3 MB): its temporary folder is removed, and
    so is the fresh run's folder (nothing to resume from)."""
    ro, full = disks
    refused = cli("train", workflow, "--device", "cpu", "--out", ro / "t", env=train_env())
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1] == (
        f"error: cannot write {ro / 't'}: Read-only file system"
    ), refused.stderr
    filled = cli("train", workflow, "--device", "cpu", "--out", full / "t", env=train_env())
    assert filled.returncode == 2 and filled.stderr.splitlines()[-1].endswith(
        f"error: cannot write {full / 't' / 'checkpoints' / 'step-1'}: No space left on device"
    ), filled.stderr
    assert "Traceback" not in filled.stderr and _left(full) == []


def _damaged(file: Path, how: str) -> None:
    """`file` as a failing disk may leave it: cut short, or its bytes replaced by garbage."""
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 3] if how == "truncated" else bytes(range(256)) * 4)


@pytest.mark.parametrize(("command", "how"), [("run", "truncated"), ("eval", "garbage")])
def test_a_damaged_model_file_is_one_line_naming_it(tmp_path, workflow, tiny_model_path, command, how):
    """A truncated or garbage `model.safetensors` given with `--model DIR` was an "internal error"
    (safetensors' own error): one line naming the file, exit 2, and `run` writes nothing."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model_path, model)
    _damaged(model / "model.safetensors", how)
    out = ("--out", tmp_path / "out") if command == "run" else ()
    done = cli(command, workflow, "--model", model, "--limit", "1", *out, timeout=120)
    said = f"error: cannot load model `{model}`: {model / 'model.safetensors'}: Error while deserializing "
    assert done.returncode == 2 and done.stderr.startswith(said), done.stderr
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_resume_from_a_damaged_checkpoint_is_one_line_naming_the_file(tmp_path, workflow):
    """A truncated engine state in the last checkpoint was an "internal error" (torch.load's own error, in
    DeepSpeed): `--resume` says which file is damaged, exit 2, and the run is left as it was. (A damaged
    RNG or rank state: tests/rl/test_worker_faults.py.)"""
    run = tmp_path / "run"
    trained = cli("train", workflow, "--device", "cpu", "--out", run, "--steps", "1", env=train_env())
    assert trained.returncode == 0, trained.stderr
    before = (run / "metrics.jsonl").read_text()
    damaged = run / "checkpoints" / "step-1" / "lm" / "state" / "mp_rank_00_model_states.pt"
    _damaged(damaged, "truncated")
    args = ("train", workflow, "--device", "cpu", "--out", run, "--resume", "--steps", "2")
    done = cli(*args, env=train_env(), timeout=300)
    said = f"error: cannot resume from {damaged}: cannot read it back (RuntimeError: PytorchStreamReader"
    assert done.returncode == 2 and done.stderr.startswith(said), done.stderr
    assert len(done.stderr.splitlines()) == 1 and (run / "metrics.jsonl").read_text() == before
    assert not (run / ".lock").exists()
