"""`run`, `eval`, `audit`, `render` as a user runs them (scripted backend: no model needed)."""

import json

from clitools import cli

SCRIPT = {
    "solver": ["\\boxed{4}", "\\boxed{5}", "\\boxed{4}"],
    "verifier": ["<verify>approve</verify>"],
    "aggregator": ["FINAL: \\boxed{4}", "FINAL: \\boxed{5}"],
}


def _script(tmp_path, script=SCRIPT):
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(script))
    return path


def test_run_then_audit(tmp_path):
    out = tmp_path / "r1"
    r = cli(
        "run",
        "workflows/math_fixed.srpo",
        "--backend",
        "scripted",
        "--model",
        _script(tmp_path),
        "--limit",
        "2",
        "--samples",
        "2",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("4 episodes, 12 events (0 incomplete)")
    lines = (out / "traces.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["schema"] == "srpo-trace/1"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["mean_set_size"] == (3 + 1 + 1) / 3
    a = cli("audit", out / "traces.jsonl", "-n", "1")
    assert a.returncode == 0, a.stderr
    rows = [line for line in a.stdout.splitlines() if line.startswith("| e") and "| type |" not in line]
    assert [row.split(" | ")[1] for row in rows] == [
        "parallel:solver",
        "verify:verifier",
        "aggregate:aggregator",
    ]
    assert rows[0].split(" | ")[3] == "3" and rows[0].endswith("-> verify:verifier |")
    assert "4 episodes, 12 events, 0 incomplete" in a.stdout


def test_eval_reports_avg_and_pass(tmp_path):
    out = tmp_path / "e1"
    data = tmp_path / "two.jsonl"
    data.write_text(
        '{"id": "a", "problem": "2+2", "answer": "4"}\n{"id": "b", "problem": "2+3", "answer": "5"}\n'
    )
    r = cli(
        "eval",
        "workflows/math_fixed.srpo",
        "--backend",
        "scripted",
        "--model",
        _script(tmp_path),
        "--data",
        data,
        "-k",
        "2",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    (row,) = metrics["datasets"]
    # the aggregator alternates 4, 5 across the 4 episodes: a=4 right once, b=5 right once
    assert row["avg_at_k"] == 0.5 and row["pass_at_k"] == 1.0 and row["queries"] == 2
    assert "| two | 2 | 50.0 | 100.0 |" in r.stdout


def test_render_shows_a_role_prompt():
    r = cli("render", "workflows/math_routed.srpo", "--role", "solver", "--replica", "2")
    assert r.returncode == 0, r.stderr
    assert "You are solver 2." in r.stdout and "Problem:" in r.stdout


def test_one_line_errors(tmp_path):
    cases = [
        (["run", "nope.srpo"], 2, "error: cannot read nope.srpo: no such file"),
        (
            ["run", "workflows/math_fixed.srpo", "--backend", "scripted"],
            2,
            "error: --backend scripted needs the reply script: --model replies.json",
        ),
        (["run", "workflows/math_fixed.srpo", "--backend", "scripted", "--model", "missing.json"], 2, None),
        (["audit", "missing.jsonl"], 2, "error: cannot read missing.jsonl: no such file"),
        (["render", "workflows/math_fixed.srpo", "--role", "nobody"], 2, None),
        (
            [
                "run",
                "workflows/math_fixed.srpo",
                "--data",
                "none.jsonl",
                "--backend",
                "scripted",
                "--model",
                str(_script(tmp_path)),
            ],
            2,
            "error: cannot read none.jsonl: no such file",
        ),
    ]
    for args, code, line in cases:
        r = cli(*args)
        assert r.returncode == code, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        if line:
            assert r.stderr.strip() == line


def test_bad_trace_line_is_named(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"schema": "srpo-trace/1", "episode_id": 1}\n')
    r = cli("audit", path)
    assert r.returncode == 2 and r.stderr.startswith(f"error: {path}:1:")


def test_failed_run_leaves_no_output_folder(tmp_path):
    out = tmp_path / "never"
    bad = _script(tmp_path, {"solver": ["\\boxed{1}"]})  # no reply for the verifier: the run fails
    r = cli(
        "run",
        "workflows/math_fixed.srpo",
        "--backend",
        "scripted",
        "--model",
        bad,
        "--limit",
        "1",
        "--out",
        out,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.glob(".never*"))


def test_run_and_eval_decode_with_a_static_cache(tmp_path):
    """The embedded model through the hf engine's static-cache loop; an unknown mode is a usage error."""
    r = cli("run", "workflows/quickstart.srpo", "--decode", "static", "--limit", "2", "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("2 episodes") and (tmp_path / "r" / "traces.jsonl").is_file()
    e = cli(
        "eval",
        "workflows/quickstart.srpo",
        "--decode",
        "static",
        "-k",
        "2",
        "--limit",
        "2",
        "--out",
        tmp_path / "e",
    )
    assert e.returncode == 0, e.stderr
    assert json.loads((tmp_path / "e" / "metrics.json").read_text())
    bad = cli(
        "run", "workflows/quickstart.srpo", "--decode", "eager", "--limit", "1", "--out", tmp_path / "x"
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "'eager' is not one of" in bad.stderr
    assert not (tmp_path / "x").exists()
