"""A `"f.py:fn"` reference's function, read with `ast` (the user's code is never imported or run)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from srpo_dsl.lang.usercode.pycode import read_module, split_ref, top_level
from srpo_dsl.lang.usercode.pysource import RefProblem, source_of


@dataclass(frozen=True)
class PyTarget:
    """Where a reference's name is bound (1-based `line`), and its `def` node when it is one."""

    file: Path
    line: int
    function: str
    node: ast.FunctionDef | ast.AsyncFunctionDef | None


def locate(text: str, workflow: str) -> PyTarget | None:
    """The binding of `text` (relative files resolve from the workflow's folder); None if absent."""
    try:
        where, function = split_ref(text)
        path, _ = source_of(where, Path(workflow).parent)
        found = top_level(read_module(path))
    except RefProblem:
        return None
    if function in found.defs:
        node, line = found.defs[function]
        return PyTarget(path, line, function, node)
    if function in found.others:
        return PyTarget(path, found.others[function][1], function, None)
    return None


def describe(target: PyTarget) -> str:
    """`def fn(args) -> ret` and the first line of its docstring, as Markdown."""
    where = f"{target.file.name}:{target.line}"
    if target.node is None:
        return f"`{target.function}` ({where}): not a `def`"
    node = target.node
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    signature = f"{prefix} {node.name}({ast.unparse(node.args)}){returns}"
    doc = (ast.get_docstring(node) or "").strip().splitlines()
    first = f"\n\n{doc[0]}" if doc else ""
    return f"```python\n{signature}\n```\n{where}{first}"
