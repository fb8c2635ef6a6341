"""Workflows that call a user's Python file: a folder with user.py and its workflow (`make`), run by the
scripted backend (`SCRIPT`, `run_scripted`), and a workflow's diagnostics as tuples (`diagnostics`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from srpo_dsl.lang import analyze
from tests.support.clitools import cli

BASE_CODE = """
import time
CALLS = []

def load(split, n=3):
    return [{"question": f"{split} {i}", "gold": str(i)} for i in range(n)]

def score(answer, row):
    return float(answer == row["gold"])

def calc(queries, suffix="!"):
    CALLS.append(len(queries))
    return [q + suffix for q in queries]

def parse(text):
    return text.startswith("ok"), text[3:]
"""

WORKFLOW = """workflow w
policy lm = hf("m")
task "user.py:load"(n = 3)
tool calc = "user.py:calc"(timeout = 5{tool_options})
agent a[2] uses lm prompt "p.j2" emits "user.py:parse"
agent b uses lm prompt "p.j2" emits text
parallel a
call calc on a
aggregate b
reward "user.py:{reward}"(b) invalid -0.5
"""


def make(tmp_path: Path, code: str = "", reward: str = "score", tool_options: str = "") -> Path:
    """A workflow folder with user.py = BASE_CODE + `code`; returns the workflow path."""
    (tmp_path / "user.py").write_text(BASE_CODE + textwrap.dedent(code))
    (tmp_path / "p.j2").write_text("{{ task.question }} {{ observations | length }}")
    path = tmp_path / "w.srpo"
    path.write_text(WORKFLOW.format(reward=reward, tool_options=tool_options))
    return path


SCRIPT = {"a": ["ok 1", "bad", "ok 2"], "b": ["1", "0", "2"]}


def run_scripted(tmp_path: Path, path: Path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(SCRIPT))
    return cli("run", path, "--backend", "scripted", "--model", script, "--out", tmp_path / "out")


def diagnostics(folder: Path, text: str) -> list[tuple]:
    result = analyze(text, str(folder / "w.srpo"), [folder])
    return [(d.code, d.span.line, d.span.col, d.message, d.hint) for d in result.diagnostics]
