"""The files under a workflow's folder that a completion or a quick fix may name: templates and Python
files, found by a walk that skips hidden folders and those of installed code (`SKIPPED`) and stops
after `LIMIT` files looked at (a workflow in a large folder costs no more)."""

from __future__ import annotations

import os
from pathlib import Path

from srpo_dsl.lsp.workspace_files import SKIPPED

TEMPLATE_SUFFIXES = (".j2", ".jinja", ".jinja2")
LIMIT = 2000  # files looked at under the folder


def files_under(folder: Path, suffixes: tuple[str, ...], limit: int = LIMIT) -> list[str]:
    """The files under `folder` whose names end in one of `suffixes` (not in hidden or `SKIPPED`
    folders), as sorted paths relative to it, among the first `limit` files the walk (in name order)
    looks at."""
    found: list[str] = []
    seen = 0
    for here, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED)
        for name in sorted(names):
            seen += 1
            if seen > limit:
                return sorted(found)
            if name.endswith(suffixes) and not name.startswith("."):
                found.append((Path(here) / name).relative_to(folder).as_posix())
    return sorted(found)
