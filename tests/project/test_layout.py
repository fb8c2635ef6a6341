"""The tests mirror the package, and each test is in one tier (README.md, "Run the tests").

The rule: every test file is `tests/FOLDER/test_NAME.py`, one level down, where FOLDER is a sub-package of
`srpo_dsl` (a folder with an `__init__.py`) or one of OTHER_FOLDERS; a test file in a sub-package's folder
names what it tests: `srpo_dsl.PKG`, a file under `srpo_dsl/PKG/`, or its command `srpo-dsl PKG` (in
`tests/cli/`, any `srpo-dsl` command or `cli(...)`). What test files share lives in SHARED_FOLDERS and
`tests/conftest.py`, which hold no test file; a test file, and a bench/ script, imports what it shares from
`tests.support`, never from a test file or `tests/conftest.py` (whose fixtures are used by name).
Basenames are unique: pytest imports a test file by its basename (no `__init__.py`: the folders are not
packages). Every marker `pyproject.toml` registers is a tier with its own command in the README."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PACKAGES = sorted(p.parent.name for p in (ROOT / "srpo_dsl").glob("*/__init__.py"))
OTHER_FOLDERS = {  # folders of tests that do not mirror a sub-package, and what they test
    "core": "srpo_dsl's top-level modules (srpo_dsl/*.py)",
    "bench": "the bench/ scripts",
    "docs": "README.md and docs/",
    "editors": "the editor setups in editors/",
    "project": "the repository as a whole: layering, dependency floors, this layout",
}
SHARED_FOLDERS = {"support", "data", "snapshots"}  # helpers, data files, snapshots: no test file
TEST_FILE = re.compile(r"test_\w+\.py")


def every_test_file() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_sits_one_level_down_in_a_package_s_or_a_listed_folder() -> None:
    allowed = set(PACKAGES) | set(OTHER_FOLDERS)
    misplaced = [
        str(p.relative_to(ROOT))
        for p in every_test_file()
        if p.parent.parent != TESTS or p.parent.name not in allowed
    ]
    assert not misplaced, f"move them into tests/<sub-package>/ or one of {sorted(OTHER_FOLDERS)}"


def test_every_folder_of_tests_is_a_package_s_or_listed_and_holds_test_files_only() -> None:
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    unknown = folders - set(PACKAGES) - set(OTHER_FOLDERS) - SHARED_FOLDERS
    assert not unknown, f"tests/{sorted(unknown)}: not a sub-package of srpo_dsl nor a listed folder"
    others = [
        str(p.relative_to(ROOT))
        for folder in folders - SHARED_FOLDERS
        for p in (TESTS / folder).iterdir()
        if p.name != "__pycache__" and not TEST_FILE.fullmatch(p.name)
    ]
    assert not others, "what tests share goes into tests/support/ (or tests/conftest.py)"
    assert not [p.name for p in TESTS.glob("*.py") if p.name != "conftest.py"], (
        "tests/ itself holds conftest.py"
    )


def test_a_test_file_in_a_package_s_folder_names_that_package() -> None:
    silent = []
    for path in every_test_file():
        package = path.parent.name
        if package not in PACKAGES:
            continue
        named = rf"srpo_dsl[./]{package}\b|srpo-dsl {package}\b" + (
            r"|srpo-dsl \w|\bcli\(" if package == "cli" else ""
        )
        files = (ROOT / "srpo_dsl" / package).rglob("*.py")
        text = path.read_text(encoding="utf-8")
        if not re.search(named, text) and not any(
            f"{f.relative_to(ROOT / 'srpo_dsl')}" in text for f in files
        ):
            silent.append(str(path.relative_to(ROOT)))
    assert not silent, f"they name nothing of the sub-package whose folder they are in: {silent}"


def test_test_file_basenames_are_unique() -> None:
    names = [p.name for p in every_test_file()]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_every_registered_marker_has_a_tier_command_in_the_readme() -> None:
    block = (ROOT / "pyproject.toml").read_text().split("\nmarkers = [", 1)[1].split("\n]", 1)[0]
    markers = re.findall(r'^  "(\w+):', block, re.MULTILINE)
    assert markers, "pyproject.toml registers no marker"
    commands = re.findall(
        r"^ {4}python -m pytest -m (.+?)  #", (ROOT / "README.md").read_text(), re.MULTILINE
    )
    fast = "not " + " and not ".join(markers)
    assert f'"{fast}"' in commands, f"the fast tier: python -m pytest -m {fast!r}"
    for marker in markers:
        assert any(re.search(rf"(?<!not ){marker}\b", c) for c in commands), f"no README command for {marker}"


def imports_of_test_modules(path: Path) -> list[str]:
    """`line: module` for each import in `path` of a module of tests/ other than tests/support/."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "tests" and not node.level:
            modules = [f"tests.{alias.name}" for alias in node.names]  # `from tests import conftest`
        elif isinstance(node, ast.ImportFrom):
            modules = [("." * node.level) + (node.module or "")]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            local = module.startswith((".", "tests.")) or module == "tests"
            if local and module != "tests.support" and not module.startswith("tests.support."):
                found.append((node.lineno, module))
    return [f"{line}: {module}" for line, module in sorted(found)]


def test_tests_and_bench_scripts_import_what_tests_share_from_tests_support_only() -> None:
    reaching = {
        str(path.relative_to(ROOT)): found
        for path in sorted([*TESTS.rglob("*.py"), *(ROOT / "bench").rglob("*.py")])
        if (found := imports_of_test_modules(path))
    }
    assert not reaching, f"move what they import into tests/support/: {reaching}"
