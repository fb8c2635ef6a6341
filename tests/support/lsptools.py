"""What the language server must publish: `srpo-dsl validate --format json`'s diagnostics, as LSP's; the
formatting options a client sends (`OPTIONS`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.clitools import ROOT


def validate_json(path: Path, prefix: Sequence[str] = ()) -> list[dict]:
    """`srpo-dsl validate PATH --format json`, started by `prefix` (as the server under test is)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [*prefix, sys.executable, "-m", "srpo_dsl", "validate", str(path), "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    return json.loads(done.stdout)


def as_lsp(d: dict) -> dict:
    """What the server must publish for one diagnostic of `validate --format json`."""
    return {
        "code": d["code"],
        "severity": 1 if d["severity"] == "error" else 2,
        "message": d["message"] + (f"\nhint: {d['hint']}" if d["hint"] else ""),
        "range": {
            "start": {"line": d["line"] - 1, "character": d["col"] - 1},
            "end": {"line": d["end_line"] - 1, "character": d["end_col"] - 1},
        },
    }


def published(diags: list[dict]) -> list[dict]:
    return [{k: d[k] for k in ("code", "severity", "message", "range")} for d in diags]


QUICKSTART = ROOT / "workflows" / "quickstart.srpo"
TYPO = ("parallel solver ", "parallel solvers")  # an undefined agent: E012 on line 13
OPTIONS = {"tabSize": 4, "insertSpaces": True}  # formatting options a client sends


def editor_files(folder: Path) -> tuple[Path, Path]:
    """In `folder`: the quickstart's templates, a workflow with an error (broken.srpo: TYPO) and one
    that needs formatting (messy.srpo: its columns no longer aligned), as the editor tests open them."""
    shutil.copytree(ROOT / "workflows" / "quickstart", folder / "quickstart")
    text = QUICKSTART.read_text(encoding="utf-8")
    broken, messy = folder / "broken.srpo", folder / "messy.srpo"
    broken.write_text(text.replace(*TYPO), encoding="utf-8")
    messy.write_text(re.sub(" +", " ", text), encoding="utf-8")
    return broken, messy
