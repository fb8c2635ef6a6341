"""The environment that counts a command's compiles (`sitecustomize` here), and the count."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
ROOT = FOLDER.parents[2]


def counting(env: Mapping[str, str], file: Path) -> dict[str, str]:
    """`env` with the hook on: each process of the command that compiles a workflow notes it in `file`."""
    path = [str(FOLDER), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": ":".join(path), "SRPO_DSL_TEST_COMPILES": str(file)}


def compiling_processes(file: Path) -> int:
    """How many processes compiled a workflow (0: none, or the hook was off)."""
    return len(set(file.read_text().split())) if file.exists() else 0
