"""Prints the lowest version pyproject.toml allows of every direct dependency, as pip constraints
(`name==floor`, with its environment marker): `.ci/run` installs the package under them into a second
environment and runs the fast tests there, so every floor is one that was installed and tested.

    python .ci/minima.py > minima.txt

torch is left out: the only torch wheel on this machine is 2.13.0 for the CPU (.ci/constraints.txt),
so its floor cannot be installed here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
UNTESTED = {"torch"}  # kept at .ci/constraints.txt's version (see above)


def floors(pyproject: Path = PYPROJECT) -> list[str]:
    """`name==floor[; marker]` per dependency of [project] (extras dropped); exits when one has no `>=`."""
    lines = []
    for requirement in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        spec, _, marker = requirement.partition(";")
        name = re.match(r"[A-Za-z0-9_.-]+", spec).group()
        floor = re.search(r">=\s*([^,\s]+)", spec)
        if floor is None:
            raise SystemExit(f"{pyproject.name}: the dependency {requirement!r} has no floor (>=)")
        if name not in UNTESTED:
            lines.append(f"{name}=={floor.group(1)}" + (f"; {marker.strip()}" if marker else ""))
    return lines


if __name__ == "__main__":
    sys.stdout.write("\n".join(floors()) + "\n")
