"""The VS Code extension under node, as VS Code itself runs it: every shipped workflow tokenized by
`vscode-textmate` on `vscode-oniguruma` (editors/vscode/test/tokenize.js) with the extension's
grammar, checked character by character against the parser's own lexer and, for one file, against
a reviewed snapshot of its scopes; and the extension packaged with `vsce` into a `.vsix`.

They need node and `npm ci` in editors/vscode (`.ci/run` does both). Skipped without them, unless
SRPO_DSL_NODE_TESTS=required (CI), where a missing piece fails. After a deliberate change to the
grammar, review the snapshot's diff after `SRPO_DSL_UPDATE_SNAPSHOT=1 pytest tests/test_vscode_node.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from srpo_dsl.lang.format import tokens_of
from srpo_dsl.lang.textmate import DECLARING, keywords

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "editors" / "vscode"
WORKFLOWS = sorted((ROOT / "workflows").glob("*.srpo"))
SNAPPED = ROOT / "workflows" / "supervisor.srpo"
SNAPSHOT = ROOT / "tests" / "snapshots" / "supervisor.srpo.scopes"
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
        "SRPO_DSL_UPDATE_SNAPSHOT=1 pytest tests/test_vscode_node.py, and review the diff"
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
    assert grammar == (EXT / "syntaxes" / "srpo.tmLanguage.json").read_text(encoding="utf-8")
    assert manifest["contributes"]["languages"][0]["extensions"] == [".srpo"]
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
    for script in ("extension.js", "test/tokenize.js"):
        done = subprocess.run(
            ["node", "--check", script], cwd=EXT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr


def test_tokenize_js_without_files_is_a_usage_error() -> None:
    need_node()
    done = subprocess.run(["node", "test/tokenize.js"], cwd=EXT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("usage:")
