"""Running the command line as a user does: `python -m srpo_dsl ...` from the project root; loading a
bench script as a module."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, cwd=ROOT, timeout=300, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "srpo_dsl", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=env,
    )


def load_bench(name: str):
    """bench/NAME.py as the module NAME (registered first: dataclasses look their module up)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]
