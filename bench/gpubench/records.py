"""The bench's records: one JSON object a line in the `--json` file, appended as each case (and each
training step) ends, each carrying the run's machine fields, so a run cut short keeps what it finished."""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ("torch", "transformers", "deepspeed", "trl")  # the packages whose versions every record names


def context(device: str) -> dict[str, Any]:
    """The fields of every record: the device, the host's CPU, Python and package versions, the commit
    (`git describe --always --dirty`; null outside a git checkout) and the run's start (UTC)."""
    from train_bench import cpu_name

    return {
        "device": gpu_name() if device == "cuda" else "cpu",
        "host": cpu_name(),
        "python": platform.python_version(),
        **{name: version_of(name) for name in VERSIONS},
        "commit": git(["describe", "--always", "--dirty"]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def gpu_name() -> str | None:
    """The first GPU `nvidia-smi` lists (without initialising CUDA here), or None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True
        )
    except OSError:
        return None
    names = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return names[0].strip() if names else None


def version_of(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git(args: list[str]) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    except OSError:
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def case_record(
    part: str, size: str, case: str, status: str, figures: dict | None = None, note: str | None = None
) -> dict[str, Any]:
    """A case's record: `status` done, failed, skipped or stopped; `note` says why when not done."""
    record = {"kind": "case", "part": part, "size": size, "case": case, "status": status}
    return record | ({"note": note} if note else {}) | ({"figures": figures} if figures is not None else {})


class Recorder:
    """Appends records to `path`, each line written and closed at once, and prints each case's table row
    (flushed) as soon as its record is written."""

    def __init__(self, path: Path, fields: dict[str, Any]):
        self.path, self.fields = path, fields

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record | self.fields) + "\n")

    def case(self, record: dict[str, Any], row: str) -> None:
        self.write(record)
        print(row, flush=True)

    def step(self, part: str, size: str, case: str, figures: dict[str, Any]) -> None:
        """A training step's record, as the step ends (`figures["step"]` its number)."""
        self.write({"kind": "step", "part": part, "size": size, "case": case, "figures": figures})

    def cases(self, part: str, size: str) -> dict[str, dict[str, Any]]:
        """The case records of `part` at `size` written so far (children write theirs too), by case."""
        return {r["case"]: r for r in read(self.path) if r.get("kind") == "case" and r["part"] == part
                and r["size"] == size}  # fmt: skip


def read(path: Path) -> list[dict[str, Any]]:
    """The records in `path` (a line cut by a kill mid-write is left out)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
