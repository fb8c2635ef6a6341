"""What a module of the package defines, read with `ast` (nothing imported): for the tests that check names
against the code (tests/project/test_layers.py, tests/project/test_references.py)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "srpo_dsl"


def module_source(module: str) -> Path | None:
    """`srpo_dsl.rl.loop.plan` -> its file (a package's `__init__.py`); None when there is no such module."""
    base = PACKAGE.parent.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


@cache
def top_level_names(module: str) -> frozenset[str] | None:
    """The names `module` defines, imports or exports on first use (`lazy_exports`) at its top level, and
    its sub-modules; None when there is no such module."""
    source = module_source(module)
    if source is None:
        return None
    tree = ast.parse(source.read_text(encoding="utf-8"))
    names, dicts = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if isinstance(node.value, ast.Dict) and isinstance(targets[0], ast.Name):
                dicts[targets[0].id] = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    for call in ast.walk(tree):
        if (
            isinstance(call, ast.Call)
            and getattr(call.func, "id", None) == "lazy_exports"
            and len(call.args) > 1
        ):
            names |= dicts.get(getattr(call.args[1], "id", ""), set())
    if source.name == "__init__.py":
        names |= {p.stem for p in source.parent.glob("*.py")} | {
            p.name for p in source.parent.iterdir() if p.is_dir()
        }
    return names
