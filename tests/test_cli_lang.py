"""`srpo-dsl validate` and `compile` as a user runs them: exit codes, formats, files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lang_cases import BASE

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / "workflows"


def cli(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "srpo_dsl", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


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
    assert r.stderr.strip().splitlines()[-1] == "error: cannot read does/not/exist.srpo: no such file"


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
            "from srpo_dsl.lang.parser import grammar_text; print(grammar_text().splitlines()[0])",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0 and r.stdout.startswith("// srpo-dsl")
