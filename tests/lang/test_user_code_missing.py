"""User code that is not there: every kind of reference whose file, module or function is missing is a
positioned error of `validate` (E091, E093) with the closest name, read with `ast` and never imported;
a module is found where `import` finds it at run time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from srpo_dsl.lang import analyze
from tests.support.clitools import cli
from tests.support.user_code import diagnostics

USER = """
from pathlib import Path

Path(__file__).with_name("imported.txt").write_text("side effect")  # must never run in validate
raise SystemExit("importing the user's file")

def load(split):
    return [{"question": "1", "answer": "1"}]

def calculator(queries):
    return list(queries)

def run(outputs, row, state):
    return [], True

def parse(text):
    return True, text

def scorer(answer, row):
    return 1.0

def score(answer, row):
    return 1.0

def loss(batch, config):
    return None

def estimate(inputs, eps):
    return None
"""

WORKFLOW = """workflow w
policy lm = builtin("tiny")
task "user.py:load"()
tool calc = "user.py:calculator"()
env box = "user.py:run"()
agent a uses lm prompt "p.j2" emits "user.py:parse"(calc, answer)
agent b uses lm prompt "p.j2" emits boxed
act a branch 2 keep best by "user.py:scorer"
call calc on a
step box on a
aggregate b
reward "user.py:score"(b)
train with (objective = "user.py:loss", aggregation = token-mean, advantage = "user.py:estimate")
"""
# Each kind of reference, by the function the workflow names for it.
KINDS = {
    "task loader": "load",
    "tool": "calculator",
    "environment": "run",
    "parser": "parse",
    "branch scorer": "scorer",
    "reward": "score",
    "objective": "loss",
    "advantage estimator": "estimate",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    return tmp_path


def position(text: str, ref: str) -> tuple[int, int]:
    """(line, column) of the string `"ref"` in `text`, 1-based, its opening quote."""
    at = text.index(f'"{ref}"')
    return text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)


def test_the_workflow_names_every_kind_and_is_clean(folder):
    result = analyze(WORKFLOW, str(folder / "w.srpo"), [folder])
    assert result.diagnostics == []
    assert sorted(r["function"] for r in result.graph.graph["code"]) == sorted(KINDS.values())


@pytest.mark.parametrize("function", KINDS.values(), ids=KINDS.keys())
def test_a_missing_file_is_e091_at_the_string_with_the_closest_file(folder, function):
    text = WORKFLOW.replace(f'"user.py:{function}"', f'"usr.py:{function}"')
    line, col = position(text, f"usr.py:{function}")
    (found,) = diagnostics(folder, text)
    assert found[:3] == ("E091", line, col)
    assert found[3] == f"Python file `usr.py` not found (looked in {folder})"
    assert found[4] == "did you mean `user.py`?"


@pytest.mark.parametrize("function", KINDS.values(), ids=KINDS.keys())
def test_a_missing_function_is_e093_at_the_string_with_the_closest_name(folder, function):
    text = WORKFLOW.replace(f'"user.py:{function}"', f'"user.py:{function}x"')
    line, col = position(text, f"user.py:{function}x")
    (found,) = diagnostics(folder, text)
    assert found[:4] == (
        "E093",
        line,
        col,
        f"{folder / 'user.py'} defines no top-level function `{function}x`",
    )
    assert found[4] == f"did you mean `{function}`?"


def test_a_file_in_a_missing_folder_and_one_with_no_close_name(folder):
    text = WORKFLOW.replace('"user.py:score"', '"gone/user.py:score"')
    assert diagnostics(folder, text)[0][3:] == (
        f"Python file `gone/user.py` not found (looked in {folder})",
        f"there is no folder {folder / 'gone'}",
    )
    text = WORKFLOW.replace('"user.py:score"', '"zzz.py:score"')
    assert diagnostics(folder, text)[0][4] == "Python files there: user.py"


def test_validate_runs_clean_without_importing_any_of_it(folder):
    (folder / "w.srpo").write_text(WORKFLOW)
    r = cli("validate", folder / "w.srpo")
    assert r.returncode == 0, r.stderr
    assert not (folder / "imported.txt").exists()
    assert not list(folder.rglob("__pycache__"))
    text = WORKFLOW.replace('"user.py:score"', '"user.py:scor"')
    (folder / "w.srpo").write_text(text)
    r = cli("validate", folder / "w.srpo")
    line, col = position(text, "user.py:scor")
    assert r.returncode == 1 and f"w.srpo:{line}:{col}: error[E093]: " in r.stdout
    assert not (folder / "imported.txt").exists()


# ---- modules on the Python path ---------------------------------------------------------------------------
def write(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source)


REWARD = "def graded(answer, row):\n    return 0.5\n"
# Two folders on the path, in order: what each holds, and whether `import plug.rewards` finds `graded`.
LAYOUTS = {
    "a package": ({"plug/__init__.py": "", "plug/rewards.py": REWARD}, {}, True),
    "in a later folder": ({}, {"plug/__init__.py": "", "plug/rewards.py": REWARD}, True),
    "a namespace package over two folders": ({"plug/other.py": ""}, {"plug/rewards.py": REWARD}, True),
    "hidden by a package before it": ({"plug/__init__.py": ""}, {"plug/rewards.py": REWARD}, False),
    "hidden by a module before it": ({"plug.py": ""}, {"plug/rewards.py": REWARD}, False),
    "a package without it": ({"plug/__init__.py": "", "plug/reward.py": REWARD}, {}, False),
    "no such package": ({"plugs/rewards.py": REWARD}, {}, False),
}


def runtime_imports(first: Path, second: Path) -> bool:
    """Whether `plug.rewards` imports, in a process of its own with the two folders on its path."""
    code = "import importlib; importlib.import_module('plug.rewards')"
    env = {"PYTHONPATH": f"{first}:{second}", "PATH": "/usr/bin:/bin"}
    return (
        subprocess.run([sys.executable, "-c", code], env=env, cwd=first, capture_output=True).returncode == 0
    )


@pytest.mark.parametrize(("one", "two", "imports"), LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_module_is_found_where_import_finds_it(folder, monkeypatch, one, two, imports):
    first, second = folder / "first", folder / "second"
    first.mkdir()
    second.mkdir()
    write(first, one)
    write(second, two)
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    text = WORKFLOW.replace('"user.py:score"', '"plug.rewards:graded"')
    found = diagnostics(folder, text)
    assert runtime_imports(first, second) is imports
    if imports:
        assert found == []
    else:
        line, col = position(text, "plug.rewards:graded")
        assert [d[:3] for d in found] == [("E091", line, col)]
        assert found[0][3].startswith("module `plug.rewards` not found")
    assert "plug" not in sys.modules


def test_a_missing_module_names_the_closest_one(folder, monkeypatch):
    write(folder, {"plugins/__init__.py": "", "plugins/rewards.py": REWARD})
    monkeypatch.syspath_prepend(str(folder))
    text = WORKFLOW.replace('"user.py:score"', '"plugin.rewards:graded"')
    (found,) = diagnostics(folder, text)
    assert found[3:] == (
        "module `plugin.rewards` not found on the Python path: there is no `plugin`",
        "did you mean `plugins`?",
    )
    text = WORKFLOW.replace('"user.py:score"', '"plugins.reward:graded"')
    (found,) = diagnostics(folder, text)
    assert (
        found[3]
        == f"module `plugins.reward` not found: package `plugins` ({folder / 'plugins'}) has no `reward`"
    )
    assert found[4] == "did you mean `rewards`?"


def test_a_module_without_source_is_e091(folder):
    text = WORKFLOW.replace('"user.py:score"', '"sys:exit"')
    assert diagnostics(folder, text)[0][:1] + diagnostics(folder, text)[0][3:4] == (
        "E091",
        "module `sys` is built into Python: it has no source to check",
    )
