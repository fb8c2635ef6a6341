"""Files and folders written: modes as the umask gives them (not tempfile's 0600/0700), a rewritten
file keeps its mode, a symbolic link stays a link and its target is written."""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from srpo_dsl.errors import WriteError
from srpo_dsl.io import write_atomic
from srpo_dsl.outputs import staged_output
from tests.support.clitools import ROOT, cli


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_file_and_folder_get_the_umasks_modes(tmp_path: Path, umask_022: None) -> None:
    write_atomic(tmp_path / "new.txt", "x\n")
    with staged_output(tmp_path / "out") as stage:
        write_atomic(stage / "traces.jsonl", "{}\n")
    assert mode(tmp_path / "new.txt") == 0o644
    assert (mode(tmp_path / "out"), mode(tmp_path / "out" / "traces.jsonl")) == (0o755, 0o644)
    os.umask(0o027)
    write_atomic(tmp_path / "other.txt", "x\n")
    assert mode(tmp_path / "other.txt") == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.txt", "other.txt", "out"]  # no temporary left


def test_a_rewritten_file_keeps_its_mode_and_a_replaced_folder_its_own(
    tmp_path: Path, umask_022: None
) -> None:
    (tmp_path / "f.txt").write_text("old\n")
    (tmp_path / "f.txt").chmod(0o664)
    write_atomic(tmp_path / "f.txt", "new\n")
    (tmp_path / "out").mkdir(mode=0o750)
    with staged_output(tmp_path / "out") as stage:
        write_atomic(stage / "a", "a\n")
    assert ((tmp_path / "f.txt").read_text(), mode(tmp_path / "f.txt")) == ("new\n", 0o664)
    assert mode(tmp_path / "out") == 0o750 and [p.name for p in (tmp_path / "out").iterdir()] == ["a"]


def test_a_link_stays_a_link_and_its_target_is_written(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.txt").write_text("old\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real" / "f.txt")
    (tmp_path / "results").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "results")
    write_atomic(tmp_path / "link.txt", "new\n")
    with staged_output(tmp_path / "out") as stage:
        write_atomic(stage / "a", "a\n")
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "real" / "f.txt").read_text() == "new\n"
    assert (tmp_path / "out").is_symlink() and (tmp_path / "results" / "a").read_text() == "a\n"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["f.txt"]


def test_only_a_regular_file_is_replaced(tmp_path: Path) -> None:
    """A FIFO (or device, socket, folder) is never replaced, nor a link's target that is one: one
    `WriteError` line, nothing written, no temporary file left."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to("fifo")
    (tmp_path / "folder").mkdir()
    for name, what in [
        ("fifo", "a FIFO (named pipe)"),
        ("link", "a FIFO (named pipe)"),
        ("folder", "a folder"),
    ]:
        target = tmp_path / ("fifo" if name == "link" else name)
        with pytest.raises(
            WriteError, match=rf"^cannot write {target}: it is {re.escape(what)}, not a regular"
        ):
            write_atomic(tmp_path / name, "x\n")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode) and (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "folder", "link"]


def test_fmt_writes_a_linked_workflows_target_and_keeps_its_mode(tmp_path: Path) -> None:
    shutil.copy(ROOT / "workflows" / "quickstart.srpo", tmp_path / "real.srpo")
    text = (tmp_path / "real.srpo").read_text(encoding="utf-8")
    (tmp_path / "real.srpo").write_text(text.replace("agent ", "agent  "), encoding="utf-8")
    (tmp_path / "real.srpo").chmod(0o664)
    (tmp_path / "linked.srpo").symlink_to("real.srpo")
    done = cli("fmt", tmp_path / "linked.srpo")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1 file(s) formatted, 0 unchanged\n"
    assert (tmp_path / "linked.srpo").is_symlink() and mode(tmp_path / "real.srpo") == 0o664
    assert (tmp_path / "real.srpo").read_text(encoding="utf-8") == text


def test_an_exported_model_gets_the_umasks_modes(
    tmp_path: Path, umask_022: None, tiny_random_model: Path
) -> None:
    """`export`'s `merged/` folder: safetensors writes `model.safetensors` 0600; every file gets 0644
    under umask 022, as any other file srpo-dsl writes."""
    from transformers import AutoModelForCausalLM

    from srpo_dsl.rl.loop.export import save_model

    model = AutoModelForCausalLM.from_pretrained(tiny_random_model)
    save_model(model, str(tiny_random_model), tmp_path / "merged")
    modes = {p.name: mode(p) for p in (tmp_path / "merged").iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
    assert mode(tmp_path / "merged") == 0o755
