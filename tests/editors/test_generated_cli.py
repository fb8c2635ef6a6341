"""The editor-file generators' one command line (`lang/tooling/generated.py`): `--help` prints the usage
and writes nothing (it used to write a file named `--help`), and a target that cannot be written is one
line, exit 2, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from srpo_dsl.lang.tooling import textmate, treesitter, vimsyntax

GENERATORS = [textmate, vimsyntax, treesitter]


@pytest.mark.parametrize("module", GENERATORS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_help_prints_the_usage_and_writes_nothing(module, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert module.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m {module.__name__} ")
    assert module.main(["-x"]) == 2 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module", GENERATORS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_a_target_that_cannot_be_written_is_one_line(module, tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert module.main([str(blocker / "out")]) == 2  # a path under a regular file
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and err.count("\n") == 1 and "Traceback" not in err
