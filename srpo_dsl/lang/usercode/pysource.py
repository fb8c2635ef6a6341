"""Where a reference's Python source is, found by looking at files only: nothing is imported.

`"path/to/file.py:function"` names a file relative to the workflow's folder; `"package.module:function"`
a module on `sys.path`, found as the import system finds it at run time (`importlib.import_module`):
each dotted part in turn, in each folder of its search path in order, a regular package (a folder with
`__init__`) or a module file winning over a namespace portion (a folder without one), the first such
found ending the search, and the parts after a package searched in that package's folder alone (a
namespace package's: in each of its portions). A miss is E091 with the closest name; a file that cannot
be looked at E092. Every path looked at is recorded (`filestate.look`), folders listed for a hint too.
"""

from __future__ import annotations

import importlib.machinery as machinery
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from srpo_dsl.lang.syntax.messages import did_you_mean
from srpo_dsl.lang.usercode.filestate import look

# The import system's order in one folder: extension modules, then source, then bytecode.
_SUFFIXES = (*machinery.EXTENSION_SUFFIXES, *machinery.SOURCE_SUFFIXES, *machinery.BYTECODE_SUFFIXES)
_MODULE_HINT = 'install it, add its folder to PYTHONPATH, or name the file: "path/to/file.py:function"'


class RefProblem(Exception):
    """A reference that does not resolve: `code` is the diagnostic's, the message one line."""

    def __init__(self, code: str, message: str, hint: str | None = None):
        super().__init__(message)
        self.code, self.hint = code, hint


def _is_file(path: Path) -> bool:
    """Whether `path` is a file (recorded: `filestate.look`); E092 when it cannot be looked at."""
    state = look(path)
    if state.error is not None:
        raise RefProblem("E092", f"cannot read {path}: {state.error}")
    return state.is_file


def _is_dir(path: Path) -> bool:
    state = look(path)
    return state.stat is not None and stat.S_ISDIR(state.stat[0])


def _listed(folder: Path) -> list[Path]:
    """The entries of `folder` (none when it cannot be listed); its state recorded, so a hint drawn from
    them is computed again when an entry is added or removed."""
    if not _is_dir(folder):
        return []
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def source_of(where: str, base: Path) -> tuple[Path, str | None]:
    """(the file, the module name or None) a reference's left side names; RefProblem if absent or if
    it cannot be looked at."""
    if where.endswith(".py"):
        return _python_file(where, base), None
    return find_module(where, [Path(entry or ".") for entry in sys.path]), where


def _python_file(where: str, base: Path) -> Path:
    """The `.py` file `where` names (relative to `base`, the workflow's folder); E091 with the closest
    `.py` file of its folder."""
    path = Path(where) if Path(where).is_absolute() else base / where
    if _is_file(path):
        return path
    if not _is_dir(path.parent):
        hint: str | None = f"there is no folder {path.parent}"
    else:
        shown = Path(where).parent
        files = [str(shown / p.name) for p in _listed(path.parent) if p.suffix == ".py"]
        hint = did_you_mean(where, files) or (f"Python files there: {', '.join(files)}" if files else None)
    raise RefProblem("E091", f"Python file `{where}` not found (looked in {base})", hint)


@dataclass(frozen=True)
class _Hit:
    """What one dotted part is in one folder: a package (its `__init__`), a module (its file), or a
    namespace portion (its folder: `file` is None)."""

    folder: Path
    file: Path | None
    package: bool


def _in_folder(folder: Path, part: str) -> _Hit | None:
    """`part` in `folder`, in the import system's order (a package, a module file, a namespace portion)."""
    base = folder / part
    for suffix in _SUFFIXES:
        if _is_file(base / f"__init__{suffix}"):
            return _Hit(base, base / f"__init__{suffix}", True)
    for suffix in _SUFFIXES:
        if _is_file(folder / f"{part}{suffix}"):
            return _Hit(base, folder / f"{part}{suffix}", False)
    return _Hit(base, None, True) if _is_dir(base) else None


def _find_part(part: str, search: Sequence[Path]) -> tuple[_Hit | None, list[Path]]:
    """The first package or module `part` is in `search`, and the namespace portions seen before it."""
    portions = []
    for folder in search:
        hit = _in_folder(folder, part)
        if hit is not None and hit.file is None:
            portions.append(hit.folder)
        elif hit is not None:
            return hit, portions
    return None, portions


def find_module(name: str, search: Sequence[Path]) -> Path:
    """The source file module `name` is imported from, `search` being `sys.path`; E091 when the import
    would fail or load no source."""
    if name.split(".")[0] in sys.builtin_module_names:
        raise RefProblem("E091", f"module `{name}` is built into Python: it has no source to check")
    parts = name.split(".")
    for depth, part in enumerate(parts):
        dotted = ".".join(parts[: depth + 1])
        hit, portions = _find_part(part, search)
        if hit is None and not portions:
            raise _not_found(name, parts[:depth], search)
        if depth == len(parts) - 1:
            return _source(name, hit)
        if hit is not None and not hit.package:
            raise RefProblem("E091", f"module `{name}` not found: `{dotted}` is {hit.file}, not a package")
        search = [hit.folder] if hit is not None else portions
    raise AssertionError("unreachable: a module name has a part")


def _source(name: str, hit: _Hit | None) -> Path:
    """The Python source of the module found; E091 for a folder alone or a compiled module."""
    if hit is None:
        raise RefProblem("E091", f"module `{name}` is a folder without Python files (a namespace package)")
    if hit.file is None or hit.file.suffix not in machinery.SOURCE_SUFFIXES:
        raise RefProblem("E091", f"module `{name}` is compiled ({hit.file}): it has no source to check")
    return hit.file


def _not_found(name: str, found: list[str], search: Sequence[Path]) -> RefProblem:
    """E091 for the first part of `name` after `found` (the packages found) that is in no folder of
    `search`, with the closest module or package name there."""
    part = name.split(".")[len(found)]
    names = {p.name.split(".")[0] for folder in search for p in _listed(folder)}
    near = did_you_mean(part, sorted(n for n in names if n.isidentifier()))
    if not found:
        missing = "" if part == name else f": there is no `{part}`"
        message = f"module `{name}` not found on the Python path{missing}"
        return RefProblem("E091", message, near or _MODULE_HINT)
    where = ", ".join(str(folder) for folder in search)
    message = f"module `{name}` not found: package `{'.'.join(found)}` ({where}) has no `{part}`"
    return RefProblem("E091", message, near)
