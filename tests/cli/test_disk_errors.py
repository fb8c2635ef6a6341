"""A disk that refuses the results (a read-only mount, a full one) is one line naming what could not be
written and why, exit code 2 (docs/cli.md), and leaves no temporary file or folder behind: `run`, `plot`
and `train`. Real mounts (tmpfs): `chmod` does not stop root, who runs the tests here and in CI. An
output path that names something else than a regular file (a device, a FIFO, a link, a folder) is
refused the same way before anything is written, and is left as it was."""

import json
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from srpo_dsl.cli.main import main
from tests.support.clitools import ROOT, cli
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


def test_plot_on_a_read_only_or_full_disk(disks, tmp_path, capsys):
    """A full disk fails a PNG: the `plots/` folder made for them (and its parents made with it) is
    removed, with the PNGs written before; nothing is left."""
    ro, full = disks
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
    filled = _refused(capsys, ["plot", str(tmp_path), "--out", str(full / "run" / "plots")])
    assert filled.startswith(f"error: cannot write {full / 'run' / 'plots'}/")
    assert filled.endswith(": No space left on device\n") and _left(full) == []


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


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """The block fails (TimeoutError) when it takes longer: opening a FIFO no one reads blocks forever."""

    def expired(*_: object) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _special(tmp_path: Path, kind: str) -> tuple[Path, str, object]:
    """A path of `kind` in `tmp_path`, what the refusal says it is, and what it is (unchanged after)."""
    path = tmp_path / f"out-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
        return path, "a FIFO (named pipe)", stat.S_ISFIFO
    if kind == "device":  # /dev/null's numbers: what `-o /dev/null` as root would have replaced
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return path, "a character device", stat.S_ISCHR
    if kind == "link":
        (tmp_path / "target.html").write_text("mine\n")
        path.symlink_to("target.html")
        return path, "a symbolic link (to target.html)", stat.S_ISLNK
    path.mkdir()
    return path, "a folder", stat.S_ISDIR


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with deadline(20), pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "", err
    return err


@pytest.mark.parametrize("kind", ["fifo", "device", "link", "folder"])
def test_an_output_file_is_only_ever_a_regular_file_or_a_new_path(tmp_path, capsys, kind):
    """`view -o` and `compile -o` refuse, in one line and before anything is read, a path that is a FIFO
    (whose reader would block), a device node (`-o /dev/null` as root would replace it for the whole
    machine), a symbolic link (not followed: its target stays as it was) or a folder; it is left as it
    is. `fmt` refuses to rewrite a workflow that is not a regular file, without opening it."""
    path, what, test = _special(tmp_path, kind)
    said = (
        f"error: cannot write {path}: it is {what}, not a regular file (name a new path or a regular file)\n"
    )
    for argv in (
        ["view", str(ROOT / "tests" / "data" / "old_run"), "-o", str(path)],
        ["compile", str(ROOT / "workflows" / "quickstart.srpo"), "--emit", "json", "-o", str(path)],
    ):
        assert _refused(capsys, argv) == said
        assert test(os.lstat(path).st_mode)
    if kind == "link":
        assert (tmp_path / "target.html").read_text() == "mine\n"
    if kind in ("fifo", "device"):
        said = f"error: cannot read {path}: it is {what}, not a regular file\n"
        assert _refused(capsys, ["fmt", str(path)]) == said
        assert test(os.lstat(path).st_mode)


def test_an_output_folder_that_is_a_fifo_is_refused(tmp_path, capsys):
    """`plot`, `export` and `run` write folders: a FIFO there is named, and left as it is."""
    fifo = tmp_path / "plots"
    os.mkfifo(fifo)
    row = {"step": 1, "return": 0.5, "grad_norm": 1.0, "response_length": 10, "mean_set_size": 1}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    err = _refused(capsys, ["plot", str(tmp_path), "--out", str(fifo)])
    assert err == f"error: cannot write {fifo}: it is a FIFO (named pipe), not a folder\n"
    for argv in (
        ["export", str(ROOT / "tests" / "data" / "old_run"), "--out", str(fifo)],
        ["run", str(ROOT / "workflows" / "quickstart.srpo"), "--out", str(fifo)],
    ):
        assert _refused(capsys, argv) == f"error: --out {fifo}: it is a FIFO (named pipe), not a folder\n"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


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
