""".ci/minima.py: the constraints CI installs the dependency floors with are pyproject.toml's floors."""

import importlib.util

import pytest
import tomllib

from tests.support.clitools import ROOT

spec = importlib.util.spec_from_file_location("minima", ROOT / ".ci" / "minima.py")
minima = importlib.util.module_from_spec(spec)
spec.loader.exec_module(minima)


def test_each_requirement_becomes_its_floor_pinned_with_its_marker(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\ndependencies = ["a[x]>=1.2,<2", "b >= 0.3.1", "torch>=2.4,<3", "c>=3; python_version < \'3.11\'"]\n'
    )
    assert minima.floors(tmp_path / "pyproject.toml") == [
        "a==1.2",
        "b==0.3.1",
        "c==3; python_version < '3.11'",
    ]


def test_a_requirement_without_a_floor_is_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["a>=1", "b<2"]\n')
    with pytest.raises(SystemExit, match=r"^pyproject.toml: the dependency 'b<2' has no floor \(>=\)$"):
        minima.floors(tmp_path / "pyproject.toml")


def test_the_projects_minima_cover_every_dependency_but_torch():
    names = [
        r.split(">=")[0].split("[")[0]
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ]
    lines = minima.floors()
    assert [line.split("==")[0] for line in lines] == [n for n in names if n != "torch"]
    assert "lark==1.3" in lines  # lang/syntax/lexer.py reads lark 1.3's LexerState.text
