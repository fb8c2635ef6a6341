"""How much one data row and one observation may hold (docs/traces.md, "Size limits").

A task file's row over `max_row_bytes()` (`SRPO_DSL_MAX_ROW_BYTES`, default 1 MiB) is refused, one line
naming it: a row is copied into every prompt, trace and episode made from it, so one 50 MB row made a
run of gigabytes. An observation (a Python tool's result, a retrieved document's text, an environment's
reply) over `max_observation_chars()` (`SRPO_DSL_MAX_OBSERVATION_CHARS`, default 1 MiB characters) is
cut there, a marker appended, and its original length recorded beside it (`truncated`), in the
prompts and in the trace alike.
"""

from __future__ import annotations

import json
import os

MiB = 1 << 20
ROW_VARIABLE, OBSERVATION_VARIABLE = "SRPO_DSL_MAX_ROW_BYTES", "SRPO_DSL_MAX_OBSERVATION_CHARS"


def _limit(variable: str) -> int:
    value = os.environ.get(variable, "")
    return int(value) if value.isdigit() and int(value) > 0 else MiB


def max_row_bytes() -> int:
    """The most bytes one row of a task file may hold (its JSON text)."""
    return _limit(ROW_VARIABLE)


def max_observation_chars() -> int:
    """The most characters one observation's text keeps."""
    return _limit(OBSERVATION_VARIABLE)


def size(n: int) -> str:
    """`n` bytes for a message: `512 B`, `20.0 KB`, `50.0 MB` (powers of 1024)."""
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KB" if n < MiB else f"{n / MiB:.1f} MB"


def oversized_row(row: object, nbytes: int | None = None) -> str | None:
    """Why `row` (its JSON text, or `nbytes` of it when known) may not be a task's row, or None."""
    nbytes = len(json.dumps(row, default=str).encode("utf-8")) if nbytes is None else nbytes
    if nbytes <= max_row_bytes():
        return None
    return (
        f"a row of {size(nbytes)}, over the limit of {size(max_row_bytes())} a row ({ROW_VARIABLE} raises it)"
    )


def bounded(key: str, text: str) -> dict[str, object]:
    """`{key: text}`, or for text over the limit `{key: its first characters and a marker, "truncated":
    its original length}`: an observation's field as prompts and traces hold it."""
    limit = max_observation_chars()
    if len(text) <= limit:
        return {key: text}
    cut = f"{text[:limit]}\n[... cut by srpo-dsl: {len(text) - limit} of {len(text)} characters left out]"
    return {key: cut, "truncated": len(text)}
