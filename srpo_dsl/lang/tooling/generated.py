"""The one command line of the editor files generated from the grammar: `python -m
srpo_dsl.lang.tooling.textmate PATH`, `... .vimsyntax PATH` and `... .treesitter FOLDER` each give their
files' text, and `write` writes them (exit 2 and a usage line for anything but one path; `-h`/`--help`:
the usage line, exit 0; a file that cannot be written: one line, exit 2)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path


def write(argv: list[str] | None, usage: str, files: Callable[[Path], Mapping[Path, str]]) -> int:
    """Write `files(TARGET)` (path -> text), TARGET the one argument in `argv` (default: sys.argv's)."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        print(f"usage: {usage}")
        return 0
    if len(args) != 1 or args[0].startswith("-"):
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    try:
        for path, text in files(Path(args[0])).items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write {exc.filename or args[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
