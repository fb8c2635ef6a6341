"""No module imports a layer above its own, no two sub-packages import each other, and no modules import
each other in a circle; docs/architecture.md states these layers.

Every import counts, also one inside a function or under TYPE_CHECKING: each is a dependency
of the code that holds it. A string import path (a registry's built-in entry) is a lazy reference, not an
import: it must name an existing attribute, and only the registries may point up with one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.package_ast import module_source, top_level_names

PACKAGE = Path(__file__).resolve().parents[2] / "srpo_dsl"

LAYERS = (  # lowest first: a module imports its own layer and those below it, never one above
    (
        "version",
        "errors",
        "jsonvalue",
        "io",
        "stopping",
        "launched",
        "tethered",
        "runlock",
        "runfolder",
        "outputs",
        "choices",
        "registries",
        "lazy",
        "seeds",
        "devices",
        "console",
        "progress",
        "limits",
        "template_sandbox",
        "data_sources",
        "argranges",
        "arguments",
    ),  # files, run folders, their owner, launched processes, stop signals, plugin registries, seeds, stderr
    ("lang",),  # text -> checked event graph (built-in entries named by import path, not imported)
    ("lsp",),  # the language server: the checker, the formatter and the declarations, for an editor
    ("envs",),  # task data, rewards, retrievers: the loaders of lang's task and tool kinds
    ("backends", "runtime"),  # generation; rolling a workflow out through the backends
    ("models",),  # the embedded model, built and evaluated with the runtime; model specs
    ("trackers",),  # the experiment trackers a training run reports to (TensorBoard, W&B, MLflow)
    ("rl",),  # training, and the writers of a training run's folder (runlog, checkpoints)
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


def defined_names(path: Path) -> set[str]:
    """The classes, functions and names a module assigns at its top level."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


RUNFOLDER = "srpo_dsl.runfolder"


def test_a_run_folder_is_read_through_its_format_module() -> None:
    """A run folder's format, the names of its files and their readers, is one module (`srpo_dsl.runfolder`):
    the API, sweeps and the viewer read runs through it, never through the training loop's writers
    (`rl.loop.runlog`, `rl.loop.checkpoint`), and no module takes one of its names from a module that only
    passes it on (but the API, whose `api.runs` exports the run's names to the command line)."""
    writers = {"srpo_dsl.rl.loop.runlog", "srpo_dsl.rl.loop.checkpoint"}
    past = {(rel, m) for rel, m in imports() if own_part(rel) in {"api", "sweep", "view"} and m in writers}
    assert past == set()
    names = defined_names(PACKAGE / "runfolder.py")
    assert {"METRICS", "CHECKPOINTS", "PLAN", "read_jsonl", "read_dynamics"} <= names
    elsewhere = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            module = getattr(node, "module", None) or ""
            if isinstance(node, ast.ImportFrom) and module.startswith("srpo_dsl.") and module != RUNFOLDER:
                source = module_source(module)
                passed = names - defined_names(source) if source and part_of(module) != "api" else set()
                elsewhere += [(path.name, module, a.name) for a in node.names if a.name in passed]
    assert elsewhere == []


def module_name(path: Path) -> str:
    """`.../srpo_dsl/rl/loop/plan.py` -> `srpo_dsl.rl.loop.plan`; a package's `__init__.py` -> the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph():
    """Module -> the package's modules it imports (`from srpo_dsl.models import tiny` imports `tiny`),
    every import counted, a function's and TYPE_CHECKING's too. A module's own packages are left out:
    Python runs a package's `__init__` before any module of it anyway."""
    import networkx as nx

    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph.add_edges_from(
                (name, t) for t in targets if t in modules and t != name and not name.startswith(t + ".")
            )
    return graph


def test_no_two_modules_import_each_other_even_through_others() -> None:
    """No import circle between modules (`base` <-> `chat`): each circle is a module too many or too few."""
    import networkx as nx

    graph = module_graph()
    assert graph.number_of_edges() > 500  # the test sees the imports
    assert ("srpo_dsl.rl.loop.trainer", "srpo_dsl.rl.loop.prepare") in graph.edges
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_every_lazy_export_resolves() -> None:
    """A name a package exports on first use names a module that exists (a renamed module breaks it)."""
    import importlib

    packages = [p for p in PACKAGE.rglob("__init__.py") if "lazy_exports(" in p.read_text()]
    assert len(packages) >= 2
    for init in packages:
        package = importlib.import_module(".".join(init.parent.relative_to(PACKAGE.parent).parts))
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)


TWINS = {  # public functions of one name in two modules today, each a different job: rename one when touched
    *("check_out", "checked", "collect", "described", "interrupted", "keywords", "load", "locate"),
    *("matches", "occurrences", "option_value", "outcome", "place", "record", "render", "same_file"),
    *("stopped", "summary", "to_json", "view", "watched", "write"),
}
ENTRY_POINTS = {"main"}  # `python -m` entry points: one per runnable module, by convention


def public_definitions() -> dict[str, list[str]]:
    """Public class or function name -> the modules that define it at their top level."""
    defined: dict[str, list[str]] = {}
    kinds = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, kinds) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(path.relative_to(PACKAGE).as_posix())
    return defined


def test_no_public_name_is_defined_twice() -> None:
    """One name for one thing: two modules never define public classes or functions of the same name (but
    the twins of TWINS, fewer each time one is renamed, and `main`)."""
    twice = {name for name, where in public_definitions().items() if len(set(where)) > 1}  # (overloads: one)
    assert twice - ENTRY_POINTS == TWINS  # a new twin: give it its own name; a renamed one leaves the list


IMPORT_PATH = re.compile(r"srpo_dsl(?:\.\w+)*:\w+")
DECLARING = {
    "srpo_dsl/registries.py",
    "srpo_dsl/lang/checks/schema.py",
}  # built-in entries, named by import path


def module_strings(tree: ast.Module) -> dict[str, str]:
    """The module-level names bound to strings (`PARSERS = "srpo_dsl.runtime.parsers"`, `A, B = "x", ...`)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = zip(getattr(target, "elts", [target]), getattr(node.value, "elts", [node.value]))
                found |= {
                    t.id: v.value for t, v in pairs if isinstance(t, ast.Name) and isinstance(v, ast.Constant)
                }
    return found


def string_paths() -> list[tuple[str, str]]:
    """(file relative to the repository, `"srpo_dsl.module:attribute"`) for every import path the package
    spells as a string, an f-string of a module-level name and `:attribute` included."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names, rel = module_strings(tree), path.relative_to(PACKAGE.parent).as_posix()
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
            if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
                head, tail = node.values
                if isinstance(head, ast.FormattedValue) and isinstance(head.value, ast.Name):
                    text = f"{names.get(head.value.id, '')}{getattr(tail, 'value', '')}"
            if isinstance(text, str) and IMPORT_PATH.fullmatch(text):
                found.append((rel, text))
    return found


def test_every_string_import_path_names_an_attribute_of_a_module() -> None:
    """A registry's built-in entries are import paths, resolved at first lookup; a renamed module or function
    breaks them here, read by `ast` (tests/core/test_registry.py imports them too)."""
    paths = string_paths()
    assert len(paths) >= 39  # the test sees the registries' entries, the f-strings too
    broken = []
    for rel, text in paths:
        module, _, attribute = text.partition(":")
        names = top_level_names(module)
        if names is None or attribute not in names:
            broken.append((rel, text))
    assert broken == []


def test_only_the_registries_name_a_higher_layer_by_string() -> None:
    """A string import path is a lazy reference, by design not an import: the registries (lowest layer) and
    the option schema (`lang`) name their built-in entries, which live above them, so that the names are
    known without importing them. Nowhere else may a string reach a layer above its own."""
    upward = {
        rel for rel, text in string_paths() if LAYER[part_of(text.partition(":")[0])] > LAYER[own_part(rel)]
    }
    assert upward == DECLARING


def architecture_tables() -> list[tuple[tuple[str, ...], ...]]:
    """The layer tables of docs/architecture.md: each a tuple of layers, each the parts its row names."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if re.match(r"\| \d+ \|", line):
            rows.append((int(line.split("|")[1]), tuple(re.findall(r"`([^`]+)`", line.split("|")[2]))))
        elif rows:
            assert [n for n, _ in rows] == list(range(len(rows))), rows  # layer numbers 0, 1, 2, ...
            tables.append(tuple(parts for _, parts in rows))
            rows = []
    return tables


def test_the_architecture_page_states_these_layers() -> None:
    """docs/architecture.md says what each part may import: its layer tables are LAYERS and RL_LAYERS."""
    assert architecture_tables() == [LAYERS, RL_LAYERS]
