"""DeepSpeed is imported one way (`rl/distributed/ds_import.py`), without the MLflow import its
autotuner makes (about 1.5 s of each `train` process's start where MLflow is installed)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="MLflow is not installed")
def test_deepspeed_comes_without_mlflow_and_mlflow_still_imports_after() -> None:
    probe = (
        "import sys\n"
        "from srpo_dsl.rl.distributed.ds_import import import_deepspeed\n"
        "ds = import_deepspeed()\n"
        "assert 'mlflow' not in sys.modules, 'deepspeed imported mlflow'\n"
        "assert import_deepspeed() is ds and ds.ops.__compatible_ops__ is not None\n"
        "import mlflow\n"
        "print(mlflow.__name__)\n"
    )
    env = {"PYTHONPATH": str(ROOT), "DS_ACCELERATOR": "cpu", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "mlflow", done.stderr[-2000:]


def deepspeed_imports(function: ast.AST) -> list[ast.stmt]:
    """The statements of a function body that import deepspeed or a submodule of it."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "deepspeed" for a in node.names):
            found.append(node)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "deepspeed":
            found.append(node)
    return found


def test_every_deepspeed_import_goes_through_import_deepspeed_first() -> None:
    """A function importing from deepspeed calls import_deepspeed() before (a bare `import deepspeed`
    would import MLflow again); the module imports none at its top."""
    wrong = []
    for path in sorted((ROOT / "srpo_dsl").rglob("*.py")):
        if path.name == "ds_import.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        wrong += [f"{path.relative_to(ROOT)}:{n.lineno} (module level)" for n in top if deepspeed_imports(n)]
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            calls = [
                n.lineno
                for n in ast.walk(function)
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "import_deepspeed"
            ]
            for node in deepspeed_imports(function):
                if not any(line < node.lineno for line in calls) and node.lineno > function.lineno:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not wrong, wrong
