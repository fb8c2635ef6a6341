"""Functions short enough to read at once: 60 lines is the ceiling, in the package, the benches, the
tests and CI's scripts (a definition's first line to its last, decorators aside, docstring included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CEILING = 60


def test_no_function_is_longer_than_60_lines() -> None:
    longer = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for folder in ("srpo_dsl", "bench", "tests", ".ci")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > CEILING
    ]
    assert longer == []
