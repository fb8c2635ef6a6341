"""editors/neovim/srpo.lua in Neovim itself: `nvim --headless`, with the plugin set up as a user's
init.lua would, scripted by editors/neovim/test/driver.lua against `python -m srpo_dsl lsp`. A
workflow with an error gets the `srpo` filetype and the server, its diagnostics are `validate`'s,
a hover shows the agent, a second file shares the client, and formatting gives `fmt`'s output.

They need `nvim` (Debian's `neovim` package: 0.7.2 on bookworm; `.ci/run` installs it), or the
program SRPO_DSL_NVIM names. Skipped without it, unless SRPO_DSL_EDITOR_TESTS=required (CI), where
it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from srpo_dsl.lsp.diagnostics import diagnose
from srpo_dsl.lsp.navigation import hover
from srpo_dsl.lsp.view import View
from tests.support.clitools import cli, load_bench
from tests.support.lsptools import QUICKSTART, editor_files

pytestmark = pytest.mark.editor

bench = load_bench("lsp_bench")

NVIM = os.environ.get("SRPO_DSL_NVIM", "nvim")
REQUIRED = os.environ.get("SRPO_DSL_EDITOR_TESTS") == "required"
HOVERED = ("verify verifier", "verifier")  # the line, then the agent's name on it


@pytest.fixture(scope="module")
def nvim() -> str:
    if shutil.which(NVIM) is None:
        why = f"`{NVIM}` is not installed (Debian: apt-get install neovim)"
        if REQUIRED:
            pytest.fail(f"{why}, and SRPO_DSL_EDITOR_TESTS=required")
        pytest.skip(why)
    return NVIM


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    return editor_files(tmp_path_factory.mktemp("nvim"))


def hover_position(text: str) -> dict:
    line = next(i for i, x in enumerate(text.splitlines()) if x.startswith(HOVERED[0]))
    return {"line": line, "character": text.splitlines()[line].index(HOVERED[1]) + 1}


@pytest.fixture(scope="module")
def session(nvim, files) -> dict:
    broken, messy = files
    at = hover_position(broken.read_text(encoding="utf-8"))
    job = {"scenario": "session", "broken": str(broken), "messy": str(messy), "hover": at}
    report = bench.run_nvim(job, nvim, timeout=90)
    assert report.get("failure") is None, (report["failure"], report["notified"])
    return report


def test_a_srpo_file_gets_its_filetype_and_the_server(session, files) -> None:
    assert session["filetype"] == "srpo"  # on 0.7 by the plugin's autocmd, not its `conf` fallback
    assert session["cmd"] == bench.SERVER and session["root"] == str(files[0].parent)  # no .git above
    assert session["same_client"]  # the second file of the root shares the first one's client
    assert session["notified"] == []


def test_the_server_s_diagnostics_arrive_in_neovim(session, files) -> None:
    done = cli("validate", files[0], "--format", "json")
    want = [
        (d["code"], d["line"], d["col"], d["message"] + (f"\nhint: {d['hint']}" if d["hint"] else ""))
        for d in json.loads(done.stdout)
    ]
    got = [(d["code"], d["line"], d["col"], d["message"]) for d in session["diagnostics"]]
    assert got == want
    e012 = next(d for d in session["diagnostics"] if d["code"] == "E012")
    assert (e012["line"], e012["severity"], e012["source"]) == (13, "ERROR", "srpo-dsl")
    assert e012["message"].startswith("undefined agent `solvers`")


def test_a_hover_shows_the_agent(session, files) -> None:
    text = files[0].read_text(encoding="utf-8")
    at = hover_position(text)
    view = View.of(diagnose(text, str(files[0]))[1], text)  # the text as the server last analysed it
    want = hover(view, lsp.Position(**at)).contents.value
    assert session["hover"] == want  # the request's reply, as the server computes it
    assert "`lm`" in want and "quickstart/verifier.j2" in want and "verdict" in want
    assert "quickstart/verifier.j2" in session["hover_window"]  # what vim.lsp.buf.hover() shows


def test_formatting_gives_fmt_s_output(session, files, tmp_path) -> None:
    copy = tmp_path / files[1].name
    shutil.copy(files[1], copy)
    done = cli("fmt", copy)
    assert done.returncode == 0, done.stderr
    formatted = copy.read_text(encoding="utf-8")
    assert formatted != files[1].read_text(encoding="utf-8")
    assert session["formatted"] == formatted


def test_a_missing_server_is_one_warning(nvim, files) -> None:
    job = {"scenario": "missing", "file": str(files[0]), "cmd": ["/nonexistent/srpo-dsl", "lsp"]}
    report = bench.run_nvim(job, nvim, timeout=60)
    assert report.get("failure") is None, report["failure"]
    assert report["filetype"] == "srpo" and report["clients"] == 0
    (warning,) = report["notified"]
    assert "`/nonexistent/srpo-dsl` is not an executable" in warning["message"]
    assert "setup({ cmd" in warning["message"]


def test_a_template_gets_the_server_and_its_diagnostics(nvim, tmp_path) -> None:
    role = tmp_path / "role.j2"
    role.write_text("Solve:\n{{ tsk.question }}\n", encoding="utf-8")
    report = bench.run_nvim({"scenario": "template", "file": str(role)}, nvim, timeout=60)
    assert report.get("failure") is None, report
    [unknown] = report["diagnostics"]
    assert (unknown["code"], unknown["line"], unknown["source"]) == ("E082", 2, "srpo-dsl")


def test_the_bench_times_edits_in_neovim(nvim) -> None:
    """bench/lsp_bench.py's real-client figure: edit in the buffer -> its diagnostics in Neovim."""
    version, times = bench.nvim_latencies([QUICKSTART], edits=3, pause=0.2, nvim=nvim)
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    runs = times[QUICKSTART.name]
    assert {k: len(v) for k, v in runs.items()} == {"pause": 3, "typing": 3}
    assert all(t > 0 for v in runs.values() for t in v)
    assert statistics.median(runs["pause"]) < 1.0  # sent at once, not after a debounce or a poll


# A word of workflows/quickstart.srpo (the line it starts, the word), the syntax group Neovim 0.7 gives it
# with editors/neovim/syntax/srpo.vim, and the standard group that one is shown as (--clean's colours).
HIGHLIGHTED = (
    (("# The toy", "#"), "srpoComment", "Comment"),
    (("workflow quickstart", "workflow"), "srpoKeyword", "Statement"),
    (("workflow quickstart", "quickstart"), "srpoDeclared", "Type"),
    (("policy lm", '"tiny"'), "srpoString", "Constant"),
    (("policy lm", "1.0"), "srpoNumber", "Constant"),
    (("task arith", "task"), "srpoTask", "Identifier"),
    (("task arith", "2000"), "srpoNumber", "Constant"),
    (("verify verifier", "verify"), "srpoStep", "Statement"),
    (("reward exact_match", "-0.1"), "srpoNumber", "Constant"),
    (("reward exact_match", "invalid"), "srpoKeyword", "Statement"),
    (("parallel solver", "# one"), "srpoComment", "Comment"),
)


@pytest.fixture(scope="module")
def highlighted(nvim) -> dict:
    lines = QUICKSTART.read_text(encoding="utf-8").splitlines()
    positions = []
    for (start, word), _, _ in HIGHLIGHTED:
        line = next(i for i, x in enumerate(lines) if x.startswith(start))
        positions.append([line + 1, lines[line].index(word) + 1])
    report = bench.run_nvim({"scenario": "highlight", "file": str(QUICKSTART), "positions": positions}, nvim)
    assert report.get("failure") is None, (report["failure"], report["notified"])
    return report


def test_a_workflow_is_highlighted_by_the_shipped_syntax_file(highlighted) -> None:
    assert (highlighted["filetype"], highlighted["syntax"]) == ("srpo", "srpo")
    want = [[name, shown] for _, name, shown in HIGHLIGHTED]
    assert highlighted["groups"] == want


def test_c_x_c_o_in_the_attached_buffer_completes_with_the_server(highlighted) -> None:
    assert highlighted["omnifunc"] == "v:lua.vim.lsp.omnifunc"  # 0.7 sets none: <C-x><C-o> gave E764
    # On a new line after the file's statements: the server's keywords that start one, steps included.
    assert {"agent", "policy", "reward", "train", "verify", "parallel", "repeat"} <= set(
        highlighted["completed"]
    )
    assert "workflow" not in highlighted["completed"] and "uses" not in highlighted["completed"]
