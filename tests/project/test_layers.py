"""No module imports a layer above its own, and no two sub-packages import each other.

Every import counts, also one inside a function or under TYPE_CHECKING: each is a dependency
of the code that holds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "srpo_dsl"

LAYERS = (  # lowest first: a module imports its own layer and those below it, never one above
    (
        "version",
        "errors",
        "io",
        "launched",
        "runlock",
        "outputs",
        "choices",
        "registries",
        "lazy",
        "seeds",
        "devices",
        "console",
        "progress",
        "limits",
        "data_sources",
        "argranges",
        "arguments",
    ),  # files and their owner, launched processes, plugin registries, seeds, stderr, size limits
    ("lang",),  # text -> checked event graph (built-in entries named by import path, not imported)
    ("lsp",),  # the language server: the checker, the formatter and the declarations, for an editor
    ("envs",),  # task data, rewards, retrievers: the loaders of lang's task and tool kinds
    ("backends", "runtime"),  # generation; rolling a workflow out through the backends
    ("models",),  # the embedded model, built and evaluated with the runtime; model specs
    ("trackers",),  # the experiment trackers a training run reports to (TensorBoard, W&B, MLflow)
    ("rl",),  # training, and a training run's folder (runlog)
    ("api",),  # srpo-dsl from Python: load, run, evaluate, train (docs/python.md)
    ("view", "sweep"),  # the viewer and experiments, over the runs' folders
    ("cli",),  # the command line, a thin layer over the API
    ("__init__", "__main__"),  # `srpo_dsl.load` and the rest of the API, imported on first use
)
LAYER = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def part_of(module: str) -> str:
    """`srpo_dsl.rl.loop.runlog` -> `rl`; `srpo_dsl.io` -> `io`; `srpo_dsl` -> `__init__`."""
    return module.split(".")[1] if "." in module else "__init__"


def imports() -> list[tuple[str, str]]:
    """(file relative to the repository, imported srpo_dsl module) for every import in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            rel = path.relative_to(PACKAGE.parent).as_posix()
            found += [(rel, n) for n in names if n == "srpo_dsl" or n.startswith("srpo_dsl.")]
    return found


def own_part(rel: str) -> str:
    parts = Path(rel).with_suffix("").parts
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_part_has_a_layer() -> None:
    parts = {own_part(rel) for rel, _ in imports()} | {part_of(m) for _, m in imports()}
    assert parts <= set(LAYER), parts - set(LAYER)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = {(rel, m) for rel, m in imports() if LAYER[part_of(m)] > LAYER[own_part(rel)]}
    assert upward == set()


RL_LAYERS = (  # inside `rl`, lowest first (each sub-package's docstring says the same)
    ("__init__", "objective", "distributed"),  # fixed choices; the math; this process's place
    ("engines",),  # models, adapters, DeepSpeed engines
    ("transport",),  # asynchronous rollouts: trainer <-> rollout workers
    ("loop",),  # the run's plan, the loop, checkpoints, export, held-out evaluation
)
RL_LAYER = {part: rank for rank, parts in enumerate(RL_LAYERS) for part in parts}


def rl_part(module_path: tuple[str, ...]) -> str:
    """`('srpo_dsl', 'rl', 'loop', 'trainer')` -> `loop`; `('srpo_dsl', 'rl')` -> `__init__`."""
    return module_path[2] if len(module_path) > 2 else "__init__"


def rl_imports() -> list[tuple[str, str]]:
    """(importing rl part, imported rl part) for every import between modules of `rl`."""
    out = []
    for rel, module in imports():
        mine = Path(rel).with_suffix("").parts
        theirs = tuple(module.split("."))
        if mine[1:2] == ("rl",) and theirs[1:2] == ("rl",):
            out.append((rl_part(mine), rl_part(theirs)))
    return out


def test_every_rl_subpackage_has_a_layer_and_a_docstring() -> None:
    subpackages = {p.parent.name for p in (PACKAGE / "rl").glob("*/__init__.py")}
    assert subpackages == set(RL_LAYER) - {"__init__"}
    for name in subpackages:
        assert ast.get_docstring(ast.parse((PACKAGE / "rl" / name / "__init__.py").read_text())), name


def test_no_rl_subpackage_imports_one_above_it() -> None:
    upward = {(a, b) for a, b in rl_imports() if RL_LAYER[b] > RL_LAYER[a]}
    assert upward == set()
    assert ("loop", "transport") in rl_imports()  # the test sees imports between sub-packages


def test_no_two_parts_import_each_other() -> None:
    edges = {(own_part(rel), part_of(m)) for rel, m in imports()}
    mutual = sorted((a, b) for a, b in edges if a < b and (b, a) in edges)
    assert mutual == []


def test_the_cli_speaks_to_the_api_not_past_it() -> None:
    """The command line reaches training, rollouts and models through `srpo_dsl.api` only (the language,
    the language server, sweeps and the viewer are commands of their own)."""
    below_the_api = {"rl", "runtime", "models", "backends", "envs"}
    past = {(rel, m) for rel, m in imports() if own_part(rel) == "cli" and part_of(m) in below_the_api}
    assert past == set()


def test_no_import_cycle_between_modules_of_the_api() -> None:
    import networkx as nx

    graph = nx.DiGraph()
    for rel, module in imports():
        if rel.startswith("srpo_dsl/api/") and module.startswith("srpo_dsl.api."):
            graph.add_edge(Path(rel).stem, module.split(".")[2])
    assert graph.number_of_edges() > 3  # the test sees the imports
    assert list(nx.simple_cycles(graph)) == []


def test_every_lazy_export_resolves() -> None:
    """A name a package exports on first use names a module that exists (a renamed module breaks it)."""
    import importlib

    packages = [p for p in PACKAGE.rglob("__init__.py") if "lazy_exports(" in p.read_text()]
    assert len(packages) >= 2
    for init in packages:
        package = importlib.import_module(".".join(init.parent.relative_to(PACKAGE.parent).parts))
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)


def test_no_public_class_name_is_defined_twice() -> None:
    """One name for one thing: two modules never define public classes of the same name."""
    defined: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(path.relative_to(PACKAGE).as_posix())
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}
