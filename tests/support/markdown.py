"""Reading README.md and docs/ as a newcomer does: a heading's section, its indented code blocks, a shown
`$ COMMAND` with its output (`Shown`, `trimmed`), and whether a printed line agrees with a shown one."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Shown:
    """A `$ COMMAND` line of the README and the output shown under it."""

    command: str
    output: list[str]


def section(text: str, heading: str) -> list[str]:
    """The lines under `heading`, up to the next heading of its level."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def indented_blocks(lines: list[str]) -> list[list[str]]:
    """Markdown's indented code blocks (blank lines inside kept), dedented by four spaces."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in [*lines, "end"]:
        if line.startswith("    ") or (current and not line.strip()):
            current.append(line[4:])
            continue
        while current and not current[-1].strip():
            current.pop()
        if current:
            blocks.append(current)
        current = []
    return blocks


def trimmed(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def agrees(shown: str, printed: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, printed) is not None
