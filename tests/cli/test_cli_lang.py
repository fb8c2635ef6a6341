"""`srpo-dsl validate` and `compile` as a user runs them: exit codes, formats, files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from srpo_dsl.cli.lang_cmds import Emit
from srpo_dsl.cli.main import main
from srpo_dsl.lang.compile.graph_formats import FORMATS
from tests.support.clitools import ROOT, cli
from tests.support.lang_cases import BASE

WORKFLOWS = ROOT / "workflows"


def test_validate_all_shipped_workflows():
    r = cli("validate", *sorted(WORKFLOWS.glob("*.srpo")))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s)" in r.stderr


def test_validate_reports_errors_with_exit_1(tmp_path):
    bad = tmp_path / "bad.srpo"
    bad.write_text(BASE.replace("aggregate agg", "aggregate agr"))
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    r = cli("validate", bad)
    assert r.returncode == 1
    assert f"{bad}:17:11: error[E012]: undefined agent `agr`" in r.stdout
    assert "Traceback" not in r.stderr


def test_validate_json_format(tmp_path):
    bad = tmp_path / "bad.srpo"
    bad.write_text("workflow w\nverify 3\n")
    r = cli("validate", bad, "--format", "json")
    assert r.returncode == 1
    diags = json.loads(r.stdout)
    assert diags[0] | {} == diags[0]
    assert {k: diags[0][k] for k in ("file", "line", "col", "code", "severity")} == {
        "file": str(bad),
        "line": 2,
        "col": 8,
        "code": "E001",
        "severity": "error",
    }
    assert diags[0]["message"] == "unexpected `3` (expected a name)"


def test_validate_github_format(tmp_path):
    bad = tmp_path / "bad.srpo"
    bad.write_text("workflow w\nverify 3\n")
    r = cli("validate", bad, "--format", "github")
    assert r.stdout.startswith(f"::error file={bad},line=2,col=8,")


def test_missing_file_is_usage_error():
    r = cli("validate", "does/not/exist.srpo")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "error: cannot read does/not/exist.srpo: no such file",
        "1 file(s) checked: 0 error(s), 0 warning(s), 1 unreadable",
    ]


UNREADABLE = {
    "not-utf8": (b"workflow w\n\xff\xfe\x00", "not UTF-8 text (byte 0xff at offset 11)"),
    "nul-bytes": (b"workflow w\x00\x01", "a binary file (it holds NUL bytes), not text"),
    "folder": (None, "it is a directory"),
}


@pytest.mark.parametrize("cmd", ["validate", "compile"])
@pytest.mark.parametrize("kind", UNREADABLE)
def test_unreadable_file_is_reported_once(tmp_path, capsys, cmd, kind):
    content, reason = UNREADABLE[kind]
    bad = tmp_path / "bad.srpo"
    if content is None:
        bad.mkdir()
    else:
        bad.write_bytes(content)
    with pytest.raises(SystemExit) as exited:
        main([cmd, str(bad)])
    out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert err.count("cannot read") == 1 and f"error: cannot read {bad}: {reason}\n" in err
    assert "Traceback" not in err and out == ""


def test_validate_goes_on_after_an_unreadable_file(tmp_path, capsys):
    bad = tmp_path / "bad.srpo"
    bad.write_bytes(b"\xff")
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(bad), str(WORKFLOWS / "quickstart.srpo"), str(tmp_path / "gone.srpo")])
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == 2
    assert err == [
        f"error: cannot read {bad}: not UTF-8 text (byte 0xff at offset 0)",
        f"error: cannot read {tmp_path / 'gone.srpo'}: no such file",
        "3 file(s) checked: 0 error(s), 0 warning(s), 2 unreadable",
    ]


def _with_bom(tmp_path, source: Path) -> Path:
    """`source` as a Windows editor saves it: a UTF-8 byte-order mark first, CRLF line ends."""
    path = tmp_path / source.name
    path.write_bytes(b"\xef\xbb\xbf" + source.read_text().replace("\n", "\r\n").encode())
    (tmp_path / "math").symlink_to(WORKFLOWS / "math")
    return path


def test_file_with_byte_order_mark_validates_and_compiles_alike(tmp_path, capsys):
    bom = _with_bom(tmp_path, WORKFLOWS / "math_routed.srpo")
    for args in (["validate", str(bom)], ["compile", str(bom), "-e", "json", "-o", str(tmp_path / "g.json")]):
        with pytest.raises(SystemExit) as exited:
            main(args)
        assert exited.value.code == 0, capsys.readouterr().err
    summary = capsys.readouterr().out.splitlines()[0]
    plain = cli("compile", WORKFLOWS / "math_routed.srpo", "-e", "json", "-o", tmp_path / "plain.json")
    assert summary == plain.stdout.splitlines()[0]  # same event steps, hash and bounds


def test_bad_option_is_usage_error():
    r = cli("compile", WORKFLOWS / "quickstart.srpo", "--emit", "svg")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_compile_json_to_file(tmp_path):
    out = tmp_path / "g.json"
    r = cli("compile", WORKFLOWS / "math_routed.srpo", "--emit", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "at most 13 events, 21 model calls, 0 tool calls" in r.stdout
    data = json.loads(out.read_text())
    assert data["graph"]["name"] == "math_routed" and data["directed"] is True
    assert not list(tmp_path.glob(".g.json.*"))  # no temp file left behind


def test_compile_mermaid_to_stdout_and_bounds_to_stderr():
    r = cli("compile", WORKFLOWS / "search_routed.srpo", "--emit", "mermaid")
    assert r.returncode == 0
    assert r.stdout.startswith("flowchart TD")
    assert "at most 13 events, 29 model calls, 20 tool calls" in r.stderr


def test_compile_error_exit_1(tmp_path):
    bad = tmp_path / "bad.srpo"
    bad.write_text("workflow w\n")
    r = cli("compile", bad)
    assert r.returncode == 1
    assert "error[E025]" in r.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_compile_emits_every_export_format(fmt):
    """`--emit` offers each writer of `export.FORMATS` (the one list) and prints what it writes."""
    assert fmt in {e.value for e in Emit}
    r = cli("compile", str(ROOT / "workflows/math_fixed.srpo"), "--emit", fmt)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


@pytest.mark.parametrize("cmd", ["validate", "compile"])
def test_help_has_examples(cmd):
    r = cli(cmd, "--help")
    assert r.returncode == 0 and "Examples" in r.stdout


def test_validate_does_not_import_heavy_libraries():
    code = (
        "import sys; from srpo_dsl.cli.main import main\n"
        "try:\n    main(['validate', 'workflows/quickstart.srpo'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'deepspeed') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_grammar_is_found_outside_the_repository(tmp_path):
    """Installed non-editable, the grammar comes from package data; from a foreign folder it must load."""
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from srpo_dsl.lang.syntax.grammar import grammar_text; print(grammar_text().splitlines()[0])",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0 and r.stdout.startswith("// srpo-dsl")
