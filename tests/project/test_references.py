"""Every repository file a docstring, a comment or a page names exists, and nothing names a file outside
the repository.

What is read: the docstrings and comments of the package, the tests and the benchmarks, README.md and
docs/*.md, and the example workflows and experiments (which name their data relative to themselves).
A word is a repository path when
- its first folder is one of the repository's own (`srpo_dsl/...`, `tests/...`, `docs/...`): it must
  exist, as a file or a folder;
- it ends in `.py` (a bare module name like `plan.py`, or `rl/loop/plan.py`): some file of the repository
  must end with it, unless it is one of `USER_FILES`, the names the docs give a user's own Python;
- it is a bare `*.md` name: a page of the repository, or a file srpo-dsl writes (a string of the package).
A dotted name in backquotes that starts with a part of the package (`rl.loop.plan.TrainPlan`,
`srpo_dsl.lang.check`) names a module and, after it, an attribute that module defines; within the
package it may be relative to the citing module's own package (in `lsp`, `view` is `lsp.view`).
A path that climbs out with `../` names a repository path when what follows is one (a workflow's
`../data/math_sample.jsonl`), which must exist; any other is outside the repository, and only a user's
template (`*.j2`, looked up beside the user's workflow) may be one. Paths with a placeholder (`bench/NAME.py`,
`tests/test_*.py`) and the run folders of example commands (`runs/...`) are not repository paths.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

from tests.support.package_ast import PACKAGE, top_level_names

ROOT = Path(__file__).resolve().parents[2]
USER_FILES = {  # the names the docs and docstrings give a user's own files, in examples
    *("file.py", "f.py", "user.py", "tot.py", "path/to/file.py", "my_loss.py", "my_adv.py", "my_task.py"),
    *("workflows/broken.srpo", "workflows/typo.srpo", "workflows/bad.srpo", "data/big.jsonl"),
}
WORD = re.compile(r"(?<![\w./*-])((?:\.\./)+[\w./*-]+|[\w.*-]+(?:/[\w.*-]+)*/?)(:\w)?")
PLACEHOLDER = re.compile(r"[*<>{}]|(?:^|/)[A-Z][A-Z_]*(?:\.py)?(?:/|$)")


def repo_files() -> list[str]:
    command = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]  # new files too
    listed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in listed.stdout.split() if (ROOT / f).exists()]


def python_text(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


@cache
def texts() -> list[tuple[str, int, str]]:
    """(file, line, text) of everything this test reads, read once."""
    return list(read(repo_files()))


def read(files: list[str]) -> Iterator[tuple[str, int, str]]:
    for rel in files:
        top = Path(rel).parts[0]
        if rel.endswith(".py") and top in ("srpo_dsl", "tests", "bench"):
            texts = python_text((ROOT / rel).read_text(encoding="utf-8"))
        elif (
            rel == "README.md"
            or (top == "docs" and rel.endswith(".md"))
            or top in ("workflows", "experiments")
        ):
            texts = enumerate((ROOT / rel).read_text(encoding="utf-8").splitlines(), 1)
        else:
            continue
        for line, text in texts:
            yield rel, line, text


def package_strings() -> set[str]:
    """Every string constant of the package: the names of the files srpo-dsl writes."""
    found = set()
    for path in (ROOT / "srpo_dsl").rglob("*.py"):
        found |= {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)} - {
            None
        }
    return {s for s in found if isinstance(s, str)}


@dataclass(frozen=True)
class Repo:
    files: set[str]
    known: set[str]  # every folder of `files`, and every tail of a file's path (`loop/plan.py`, `plan.py`)
    written: set[str]  # the files srpo-dsl writes (the package's strings)

    @classmethod
    def of(cls, files: list[str], written: set[str]) -> Repo:
        known = {p.as_posix() for f in files for p in Path(f).parents if p != Path(".")}
        known |= {"/".join(f.split("/")[i:]) for f in files for i in range(1, f.count("/") + 1)}
        return cls(set(files), known, written)

    @cached_property
    def tops(self) -> set[str]:
        return {f.split("/")[0] for f in self.files if "/" in f}


def problem(word: str, repo: Repo) -> str | None:
    """Why `word` is a bad reference, or None."""
    path = word.rstrip(".").rstrip("/")
    climbs = path.startswith("../")
    while path.startswith("../"):
        path = path[3:]
    if not path or path.startswith(".") or PLACEHOLDER.search(path) or path in USER_FILES:
        return None
    parts = path.split("/")
    if len(parts) > 1 and parts[0] in repo.tops:
        return None if path in repo.files or path in repo.known else "no such file in the repository"
    if climbs:
        return None if path.endswith(".j2") else "a file outside the repository"
    if path.endswith(".py"):
        return None if path in repo.known else "no such module"
    if path.endswith(".md") and len(parts) == 1:
        return None if path in repo.known or path in repo.written else "a page outside the repository"
    return None


def bad_references() -> list[str]:
    listed = repo_files()
    repo = Repo.of(listed, package_strings())
    bad = []
    for rel, line, text in texts():
        for match in WORD.finditer(text):
            if match.group(2):  # `file.py:function`: a Python reference of a workflow (docs/dsl.md)
                continue
            why = problem(match.group(1), repo)
            if why:
                bad.append(f"{rel}:{line}: `{match.group(1)}`: {why}")
    return bad


def test_every_named_repository_file_exists_and_none_is_outside() -> None:
    assert bad_references() == []


def test_the_rule_sees_stale_and_outside_references() -> None:
    repo = Repo.of(["srpo_dsl/rl/loop/plan.py", "docs/objective.md"], set())
    bad = ["objective.py", "rl/loop/schedule.py", "srpo_dsl/rl/gone.py", "NOTES.md", "../shared/x.jsonl"]
    good = ["plan.py", "rl/loop/plan.py", "docs/objective.md", "srpo_dsl/rl", "file.py", "../role.j2"]
    assert [w for w in bad if problem(w, repo) is None] == []
    assert [w for w in good if problem(w, repo)] == []
    assert problem("runs/my_run/metrics.jsonl", repo) is None  # a user's run folder


FILE_SUFFIXES = re.compile(r"\.(py|md|json|jsonl|toml|srpo|j2|txt|png|csv|html)$")


def dotted_problem(name: str, rel: str) -> str | None:
    """Why the dotted `name`, cited in `rel`, names no module attribute, or None."""
    if FILE_SUFFIXES.search(name):
        return None
    own = Path(rel).parent.parts if rel.startswith("srpo_dsl/") else ("srpo_dsl",)
    tails = [name] if name.startswith("srpo_dsl.") else [".".join((*own, name)), f"srpo_dsl.{name}"]
    for dotted in tails:
        parts = dotted.split(".")
        for cut in range(len(parts), 1, -1):
            names = top_level_names(".".join(parts[:cut]))
            if names is not None:
                if cut == len(parts) or parts[cut] in names:
                    return None
                break
    return "no such module or attribute"


def bad_dotted_names() -> list[str]:
    roots = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir() if not p.name.startswith("_")}
    cited = re.compile(r"`((?:srpo_dsl\.)?(?:" + "|".join(sorted(roots)) + r")(?:\.\w+)+)")
    bad = []
    for rel, line, text in texts():
        for match in cited.finditer(text):
            why = dotted_problem(match.group(1), rel)
            if why:
                bad.append(f"{rel}:{line}: `{match.group(1)}`: {why}")
    return bad


def test_every_named_module_attribute_exists() -> None:
    assert bad_dotted_names() == []
    assert dotted_problem("rl.loop.rollout_link.join_launch", "srpo_dsl/rl/distributed/process_group.py")
    assert dotted_problem("rl.transport.link.join_launch", "srpo_dsl/rl/distributed/process_group.py") is None
    assert dotted_problem("view.Good", "srpo_dsl/lsp/lastgood.py") is None
