"""The workflows under the workspace root, each with its text (an open document's as the editor holds
it, else the file's) and its syntax tree: what workspace symbols, workspace references and a
template's rename read."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lsp.symbols import parsed

SUFFIX = ".srpo"
SKIPPED = frozenset({"node_modules", "__pycache__", "venv"})  # folders of installed code, never workflows


@dataclass(frozen=True)
class WorkspaceFile:
    """One workflow of the workspace: where it is, its text, and its tree (None while it does not parse)."""

    path: Path
    uri: str
    text: str
    tree: n.Program | None


def workflow_paths(root: Path | None) -> list[Path]:
    """Every `.srpo` file under `root`, resolved (none without a root); hidden folders and those of
    `SKIPPED` are not entered."""
    if root is None or not root.is_dir():
        return []
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED)
        found += [Path(folder, f).resolve() for f in files if f.endswith(SUFFIX)]
    return sorted(found)


def workflows(root: Path | None, opened: Mapping[Path, tuple[str, str]]) -> Iterator[WorkspaceFile]:
    """The workspace's workflows, and the open workflows outside it; `opened`: resolved path -> (uri,
    text) of each open document (its text as the editor holds it, not the disk's)."""
    paths = workflow_paths(root)
    extra = sorted(p for p in opened if p.suffix == SUFFIX and p not in set(paths))
    for path in [*paths, *extra]:
        uri, text = opened.get(path, (path.as_uri(), None))
        if text is None:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # unreadable: the workflow's own diagnostics say so when it is opened
        yield WorkspaceFile(path, uri, text, parsed(text, str(path)))
