"""Where a key of a TOML document is written: `FILE:LINE:COL` for errors that tomllib cannot place.

tomllib positions only its own syntax errors; a schema error (an unknown key, a wrong value)
comes as a path of keys and indices such as ("cell", 2, "clip"). `locate` scans the text for
the table header (`[eval]`, the third `[[cell]]`) and then the `key =` line inside it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"^(\s*)(\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+)\s*=")


def locate(text: str, path: Sequence[str | int]) -> tuple[int, int]:
    """(line, column), 1-based, of the deepest part of `path` found in `text` ((1, 1) if none)."""
    lines = text.splitlines()
    table, rest = table_of(path)
    start, end, found = table_span(lines, table)
    if not found:
        return 1, 1
    for i in range(start + (1 if table else 0), end):
        m = KEY.match(lines[i])
        if rest and m and m.group(2).strip("\"'") == rest[0]:
            return i + 1, len(m.group(1)) + 1
    if not table and rest:  # a top-level name that is a table of its own: `[extra]`
        start, _, found = table_span(lines, (rest[0],))
    return start + 1, 1


def table_of(path: Sequence[str | int]) -> tuple[tuple[str | int, ...], list[str]]:
    """The table part of a path (a name, or a name and the index of an array of tables) and the keys after."""
    if len(path) >= 2 and isinstance(path[1], int):
        return (path[0], path[1]), [str(p) for p in path[2:] if isinstance(p, str)]
    if len(path) >= 2 and isinstance(path[0], str) and isinstance(path[1], str):
        return (path[0],), [path[1]]
    return (), [str(p) for p in path[:1]]


def table_span(lines: list[str], table: tuple[str | int, ...]) -> tuple[int, int, bool]:
    """[start, end) line indices of `table` (its header line first; the top level when empty), found?"""
    headers = [
        (i, m.group(1), m.group(2).strip()) for i, line in enumerate(lines) if (m := HEADER.match(line))
    ]
    if not table:
        return 0, headers[0][0] if headers else len(lines), True
    seen = -1
    for n, (i, _, name) in enumerate(headers):
        if name != table[0]:
            continue
        seen += 1
        if len(table) == 1 or seen == table[1]:
            end = headers[n + 1][0] if n + 1 < len(headers) else len(lines)
            return i, end, True
    return 0, 0, False
