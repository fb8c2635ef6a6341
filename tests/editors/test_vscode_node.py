"""The VS Code extension under node, as VS Code itself runs it: every shipped workflow tokenized by
`vscode-textmate` on `vscode-oniguruma` (editors/vscode/test/tokenize.js) with the extension's
grammar, checked character by character against the parser's own lexer and, for one file, against
a reviewed snapshot of its scopes; the real extension.js with the real vscode-languageclient
(editors/vscode/test/client.js, with a stand-in for the `vscode` module) activated against
`python -m srpo_dsl lsp`: the server started, a diagnostic arriving, a format edit applied; and the
extension packaged with `vsce` into a `.vsix`.

They need node and `npm ci` in editors/vscode (`.ci/run` does both). Skipped without them, unless
SRPO_DSL_NODE_TESTS=required (CI), where a missing piece fails. After a deliberate change to the
grammar, review the snapshot's diff after `SRPO_DSL_UPDATE_SNAPSHOT=1 pytest tests/editors/test_vscode_node.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from srpo_dsl.lang.tooling.format import tokens_of
from srpo_dsl.lang.tooling.textmate import DECLARING, keywords
from tests.support import lsptools
from tests.support.clitools import cli

pytestmark = pytest.mark.editor

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "editors" / "vscode"
WORKFLOWS = sorted((ROOT / "workflows").glob("*.srpo"))
SNAPPED = ROOT / "workflows" / "supervisor.srpo"
SNAPSHOT = ROOT / "tests" / "snapshots" / "supervisor.srpo.scopes"
SERVER = [sys.executable, "-m", "srpo_dsl", "lsp"]
REQUIRED = os.environ.get("SRPO_DSL_NODE_TESTS") == "required"
STRING = "string.quoted.double.srpo"
PUNCTUATION = {
    "EQUAL": "keyword.operator.assignment.srpo",
    "COMMA": "punctuation.separator.srpo",
    "DOT": "punctuation.separator.srpo",
    "COMPARE": "keyword.operator.comparison.srpo",
    "NUMBER": "constant.numeric.srpo",
}


def need_node() -> None:
    missing = [
        why
        for why, ok in (
            ("node is not installed", shutil.which("node")),
            ("editors/vscode has no node_modules (run `npm ci` there)", (EXT / "node_modules").is_dir()),
        )
        if not ok
    ]
    if missing and REQUIRED:
        pytest.fail(f"{missing[0]}, and SRPO_DSL_NODE_TESTS=required")
    if missing:
        pytest.skip(missing[0])


@pytest.fixture(scope="module")
def tokens() -> dict[str, list[list[list]]]:
    """Each shipped workflow's lines as vscode-textmate tokenizes them: [start, end, text, scopes]."""
    need_node()
    cmd = ["node", "test/tokenize.js", *map(str, WORKFLOWS)]
    done = subprocess.run(cmd, cwd=EXT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {Path(f).name: lines for f, lines in json.loads(done.stdout).items()}


def expected_scopes(text: str) -> list[list[set[str]]]:
    """Per line, per character: the innermost scopes the grammar may give it, from the lexer's tokens."""
    lines = text.split("\n")
    want = [[{"source.srpo"} for _ in line] for line in lines]
    kw, prev = keywords(), ""
    for tok in tokens_of(text):
        allowed = token_scopes(tok.type, str(tok), kw, prev)
        for col in range(tok.column - 1, tok.end_column - 1):
            want[tok.line - 1][col] = allowed
        prev = str(tok)
    for line, row in zip(lines, want):  # a comment: the first `#` outside a token, to the end of the line
        start = next((i for i, c in enumerate(line) if c == "#" and row[i] == {"source.srpo"}), None)
        for col in range(start if start is not None else len(line), len(line)):
            row[col] = {"comment.line.number-sign.srpo"}
    return want


def token_scopes(kind: str, text: str, kw, prev: str) -> set[str]:
    if kind == "STRING":
        return {STRING}
    if kind == "NAME":
        return {"entity.name.type.srpo"} if prev in DECLARING else {"source.srpo"}
    if kind == "DASHED":  # a value's word with `-` (`token-mean`): unscoped, as a name
        return {"source.srpo"}
    if kind in PUNCTUATION:
        return {PUNCTUATION[kind]}
    if text in "()[]{}":
        return {"punctuation.section.brackets.srpo"}
    if text in kw.steps:
        return {"keyword.control.step.srpo"}
    if text in ("true", "false", "frozen"):
        return {"constant.language.srpo"}
    if text == "task":
        return {"variable.language.task.srpo"}
    if text in DECLARING:
        return {"keyword.other.declaration.srpo", "keyword.other.srpo"}
    assert text in kw.keywords, (kind, text)
    return {"keyword.other.srpo"}


def innermost(scopes: list[str]) -> str:
    return STRING if STRING in scopes else scopes[-1]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_a_shipped_workflow_is_scoped_as_the_lexer_reads_it(path: Path, tokens) -> None:
    text = path.read_text(encoding="utf-8")
    want, got = expected_scopes(text), tokens[path.name]
    assert len(got) == len(want)
    wrong = []
    for n, (line, row, toks) in enumerate(zip(text.split("\n"), want, got), 1):
        assert [t[2] for t in toks] == [line[t[0] : t[1]] for t in toks]
        assert "".join(t[2] for t in toks) == line  # the tokens cover the line, in order
        for start, end, piece, scopes in toks:
            for col in range(start, end):
                if innermost(scopes) not in row[col]:
                    wrong.append(f"{path.name}:{n}:{col + 1}: {piece!r} is {scopes}, not {row[col]}")
    assert not wrong, "\n".join(wrong[:20])


def test_the_check_finds_a_misscoped_keyword() -> None:
    # The check compares with the lexer: a grammar that left `verify` unscoped would fail it.
    want = expected_scopes("verify verifier\n")
    assert want[0][0] == {"keyword.control.step.srpo"} and want[0][7] == {"source.srpo"}
    assert want[0][6] == {"source.srpo"}
    declared = expected_scopes("agent a uses lm # note\n")[0]
    assert declared[6] == {"entity.name.type.srpo"} and declared[13] == {"source.srpo"}
    assert declared[16] == {"comment.line.number-sign.srpo"}


def render_scopes(lines: list[list[list]]) -> str:
    """One row per token that is not bare whitespace: LINE:COL-COL, the text, its scopes."""
    out = []
    for n, toks in enumerate(lines, 1):
        for start, end, piece, scopes in toks:
            if piece.strip():
                out.append(f"{n}:{start + 1}-{end}\t{piece}\t{' '.join(scopes[1:]) or '-'}")
    return "\n".join(out) + "\n"


def test_one_file_s_scopes_match_the_reviewed_snapshot(tokens) -> None:
    rendered = render_scopes(tokens[SNAPPED.name])
    if os.environ.get("SRPO_DSL_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(rendered, encoding="utf-8")
    assert SNAPSHOT.read_text(encoding="utf-8") == rendered, (
        f"{SNAPSHOT.name} differs: after a deliberate grammar change, "
        "SRPO_DSL_UPDATE_SNAPSHOT=1 pytest tests/editors/test_vscode_node.py, and review the diff"
    )


def test_the_extension_packages_as_a_vsix(tmp_path) -> None:
    need_node()
    vsix = tmp_path / "srpo-dsl.vsix"
    cmd = ["npx", "--no-install", "@vscode/vsce", "package", "--allow-missing-repository", "--skip-license"]
    done = subprocess.run([*cmd, "--out", str(vsix)], cwd=EXT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with zipfile.ZipFile(vsix) as zf:
        names = set(zf.namelist())
        grammar = zf.read("extension/syntaxes/srpo.tmLanguage.json").decode()
        manifest = json.loads(zf.read("extension/package.json"))
        packaged_js = zf.read("extension/extension.js")
    assert grammar == (EXT / "syntaxes" / "srpo.tmLanguage.json").read_text(encoding="utf-8")
    assert packaged_js == (EXT / "extension.js").read_bytes()  # the file test/client.js runs
    assert manifest["contributes"]["languages"][0]["extensions"] == [".srpo"]
    settings = manifest["contributes"]["configuration"]["properties"]
    assert set(settings) == {"srpo.server.command", "srpo.trace.server"}
    assert {
        "extension/extension.js",
        "extension/language-configuration.json",
        "extension.vsixmanifest",
    } <= names
    assert "extension/node_modules/vscode-languageclient/package.json" in names  # the runtime dependency
    assert not any(
        "vscode-textmate" in n or "/test/" in n for n in names
    )  # dev dependencies and tests left out


def test_the_extension_s_scripts_are_valid_javascript() -> None:
    need_node()
    for script in ("extension.js", "test/tokenize.js", "test/client.js", "test/vscode.js"):
        done = subprocess.run(
            ["node", "--check", script], cwd=EXT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", ["test/tokenize.js", "test/client.js"])
def test_a_script_without_files_is_a_usage_error(script: str) -> None:
    need_node()
    done = subprocess.run(["node", script], cwd=EXT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("usage:")


@pytest.fixture(scope="module")
def editor_files(tmp_path_factory) -> tuple[Path, Path]:
    return lsptools.editor_files(tmp_path_factory.mktemp("editor"))


def run_client(files: tuple[Path, Path], server: list[str], trace: str) -> tuple[int, dict]:
    """test/client.js: the extension activated with `server` as its `srpo.server.command`, the
    diagnostics of the first file, the second file formatted; its JSON report."""
    need_node()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the server runs in the files' folder
    cmd = ["node", "test/client.js", f"--trace={trace}", *map(str, files), "--", *server]
    done = subprocess.run(cmd, cwd=EXT, capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.fixture(scope="module")
def session(editor_files) -> dict:
    code, report = run_client(editor_files, SERVER, trace="messages")
    assert code == 0 and report["failure"] is None, (report["failure"], report["output"])
    return report


def test_the_extension_starts_the_server_with_stdio(session) -> None:
    assert session["spawned"] == [[*SERVER, "--stdio"]]  # vscode-languageclient appends --stdio
    assert session["unhandled"] == []  # no failed promise
    assert [m for m in session["shown"] if m["level"] == "error"] == []  # no error pop-up


def test_the_server_s_diagnostics_arrive_in_the_editor(session, editor_files) -> None:
    broken = editor_files[0]
    done = cli("validate", broken, "--format", "json")
    want = [
        (d["code"], d["line"], d["col"], d["message"] + (f"\nhint: {d['hint']}" if d["hint"] else ""))
        for d in json.loads(done.stdout)
    ]
    got = [(d["code"], d["line"], d["col"], d["message"]) for d in session["diagnostics"]]
    assert got == want
    e012 = next(d for d in session["diagnostics"] if d["code"] == "E012")
    assert (e012["line"], e012["severity"], e012["source"]) == (13, "error", "srpo-dsl")
    assert e012["message"].startswith("undefined agent `solvers`")


def test_the_format_edit_gives_fmt_s_output(session, editor_files, tmp_path) -> None:
    messy = editor_files[1]
    copy = tmp_path / messy.name
    shutil.copy(messy, copy)
    done = cli("fmt", copy)
    assert done.returncode == 0, done.stderr
    formatted = copy.read_text(encoding="utf-8")
    assert formatted != messy.read_text(encoding="utf-8")
    assert session["edits"] == 1 and session["formatted"] == formatted


def test_the_trace_setting_traces_the_messages(session) -> None:
    for line in ("Sending request 'initialize", "Sending request 'textDocument/formatting"):
        assert f"] {line}" in session["output"]


def test_a_server_that_rejects_stdio_fails_activation(editor_files) -> None:
    # `srpo-dsl lsp` did before it took --stdio (issue 37): `validate` rejects it the same way.
    code, report = run_client(editor_files, [sys.executable, "-m", "srpo_dsl", "validate"], trace="off")
    assert code == 1 and report["failure"].startswith("activation failed")
    assert "No such option: --stdio" in report["output"] and report["diagnostics"] is None
    assert any("could not start the language server" in m["message"] for m in report["shown"])


def test_show_the_compiled_graph_opens_compile_s_mermaid_beside(session, editor_files) -> None:
    """The palette's "srpo-dsl: Show the compiled graph" (srpo.showCompiledGraph), run with each file
    active: the messy file's graph as `srpo-dsl compile --emit mermaid` prints it, in a Mermaid editor;
    for the broken one, which does not compile, a warning and nothing opened."""
    messy = editor_files[1]
    done = cli("compile", messy, "--emit", "mermaid")
    assert done.returncode == 0, done.stderr
    assert session["graphs"] == [None, {"language": "mermaid", "text": done.stdout}]
    assert session["shown"] == [
        {
            "level": "warning",
            "message": "srpo-dsl: the workflow does not compile; its errors are in the Problems view.",
        }
    ]
