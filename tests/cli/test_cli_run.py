"""`run`, `eval`, `audit`, `render` as a user runs them (scripted backend: no model needed), and the
rules every command shares: inputs checked before anything loads, results folders never replaced
silently, the libraries' output hidden unless --verbose."""

import json
import os

import pytest
import torch

from srpo_dsl.backends.base import NOT_DOWNLOADED
from tests.support.clitools import ROOT, cli

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
    assert len(lines) == 4 and json.loads(lines[0])["schema"] == "srpo-trace/4"
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
    folder = cli("audit", out, "-n", "1")  # the run folder, as `view` takes it
    assert folder.returncode == 0 and folder.stdout == a.stdout


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
    empty = tmp_path / "traces.jsonl"
    empty.write_text("\n")
    cases = [
        (["run", "nope.srpo"], 2, "error: cannot read nope.srpo: no such file"),
        (
            ["run", "workflows/math_fixed.srpo", "--backend", "scripted"],
            2,
            "error: --backend scripted needs the reply script: --model replies.json",
        ),
        (["run", "workflows/math_fixed.srpo", "--backend", "scripted", "--model", "missing.json"], 2, None),
        (["audit", "missing.jsonl"], 2, "error: cannot read missing.jsonl: no such file"),
        (["audit", empty], 2, f"error: {empty}: no episode (an empty or truncated traces file)"),
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
        (
            ["run", "workflows/quickstart.srpo", "--model", "/nonexistent", "--out", tmp_path / "r"],
            2,
            "error: model `/nonexistent`: no such file or folder (a path, not a Hugging Face repo id: "
            "nothing is downloaded)",
        ),
    ]
    for args, code, line in cases:
        r = cli(*args)
        assert r.returncode == code, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        if line:
            assert r.stderr.strip() == line
    assert not (tmp_path / "r").exists()


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
    assert "Loading weights" not in r.stderr and "Warning" not in r.stderr  # the libraries stay quiet
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


def test_run_and_eval_show_the_libraries_only_with_verbose(tmp_path):
    r = cli("run", "workflows/quickstart.srpo", "--limit", "1", "--out", tmp_path / "r", "--verbose")
    assert r.returncode == 0, r.stderr
    assert "Loading weights" in r.stderr and r.stdout.startswith("1 episodes")


OFFLINE = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}  # the workflow's model: not here


@pytest.mark.parametrize("command", ["run", "eval"])
@pytest.mark.parametrize(
    "flags, line",
    [
        (["--data", "none.jsonl"], "error: cannot read none.jsonl: no such file"),
        (["--out", "grammar"], "error: grammar already exists (srpo.lark): pass --overwrite to replace it"),
        (["--device", "cuda"], "error: --device cuda: no CUDA device is available (use --device cpu)"),
    ],
)
def test_every_input_is_checked_before_the_model_loads(command, flags, line, tmp_path):
    """math_routed's model (Qwen3-4B) is not on this machine: had it been loaded first, its error would show."""
    if "cuda" in flags and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    r = cli(
        command, "workflows/math_routed.srpo", "--out", tmp_path / "new", *flags, env=OFFLINE
    )  # last wins
    assert r.returncode == 2 and r.stderr.startswith(line), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_model_to_download_offline_is_named_with_what_it_needs(tmp_path):
    """docs/cli.md's `eval` of math_routed (Qwen3-4B) on a shipped file, offline: one line that names the
    model and says it is downloaded on first use, exit 2, nothing written."""
    r = cli(
        "eval",
        "workflows/math_routed.srpo",
        "--data",
        "data/math_sample.jsonl",
        "--limit",
        "1",
        "-k",
        "1",
        "--out",
        tmp_path / "e",
        env=OFFLINE,
    )
    assert r.returncode == 2 and not (tmp_path / "e").exists()
    assert r.stderr.startswith("error: cannot load model `Qwen/Qwen3-4B`: ")
    assert r.stderr.endswith(f"({NOT_DOWNLOADED})\n") and r.stderr.count("\n") == 1


def _scripted(tmp_path, out, *extra):
    args = ["--backend", "scripted", "--model", _script(tmp_path), "--limit", "1", "--out", out, *extra]
    return cli("run", "workflows/math_fixed.srpo", *args)


def test_an_existing_out_folder_is_replaced_only_with_overwrite(tmp_path):
    out = tmp_path / "r1"
    out.mkdir()
    (out / "view.html").write_text("a page the user made")
    refused = _scripted(tmp_path, out)
    assert refused.returncode == 2 and refused.stderr.strip() == (
        f"error: {out} already exists (view.html): pass --overwrite to replace it, or choose another --out"
    )
    assert (out / "view.html").read_text() == "a page the user made"
    failed = cli(
        "run",
        "workflows/math_fixed.srpo",
        "--backend",
        "scripted",
        "--model",
        _script(tmp_path, {"solver": ["\\boxed{1}"]}),
        "--limit",
        "1",
        "--out",
        out,
        "--overwrite",
    )
    assert failed.returncode != 0 and (out / "view.html").is_file()  # a failed run keeps the old folder
    replaced = _scripted(tmp_path, out, "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert sorted(p.name for p in out.iterdir()) == ["graph.json", "summary.json", "traces.jsonl"]
    assert _scripted(tmp_path, tmp_path / "empty").returncode == 0  # absent (or empty): no flag needed
    ws = tmp_path / "ws"  # replacing it would delete the workflow in it, or the folder the command runs in
    ws.mkdir()
    (ws / "w.srpo").write_text((ROOT / "workflows" / "math_fixed.srpo").read_text())
    args = ["--backend", "scripted", "--model", _script(tmp_path), "--overwrite"]
    here = cli("run", ws / "w.srpo", *args, "--out", ".", cwd=ws, env=OFFLINE)
    assert here.returncode == 2 and "replacing . would delete the current folder" in here.stderr
    holder = cli("run", ws / "w.srpo", *args, "--out", ws, env=OFFLINE)
    assert holder.returncode == 2 and f"would delete {ws / 'w.srpo'}" in holder.stderr
    assert sorted(p.name for p in ws.iterdir()) == ["w.srpo"]


def test_train_export_and_sweep_refuse_a_folder_that_holds_files(tmp_path):
    out = tmp_path / "full"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    train = cli("train", "workflows/quickstart.srpo", "--out", out)
    assert train.returncode == 2 and train.stderr.strip() == (
        f"error: {out} already exists (notes.txt): pass --resume to continue the run in it, "
        "or choose another --out"
    )
    export = cli("export", tmp_path / "no-run", "--out", out)
    assert export.returncode == 2 and export.stderr.startswith(
        f"error: {out} already exists (notes.txt): pass --overwrite"
    )
    sweep = cli("sweep", "experiments/toy_ablation.toml", "--out", out)
    assert sweep.returncode == 2 and "it holds no sweep to go on with" in sweep.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_broken_workflow_shows_its_errors_as_validate_does(tmp_path):
    broken = tmp_path / "broken.srpo"
    text = (ROOT / "workflows" / "quickstart.srpo").read_text()
    broken.write_text(text.replace("parallel solver", "parallel solvers"))
    (tmp_path / "quickstart").symlink_to(ROOT / "workflows" / "quickstart")
    line = next(i for i, s in enumerate(broken.read_text().splitlines(), 1) if "parallel solvers" in s)
    for args in (["run", broken, "--out", tmp_path / "r"], ["render", broken, "--role", "solver"]):
        r = cli(*args)
        assert r.returncode == 1, r.stderr
        _, source, caret, hint = r.stderr.strip().splitlines()[-4:]
        assert (
            r.stderr.startswith(f"{broken}:{line}:") and "error[E012]: undefined agent `solvers`" in r.stderr
        )
        assert "error:" not in r.stderr and "parallel solvers" in source and "^^^^^^^" in caret
        assert hint.strip() == "= hint: did you mean `solver`?"
    assert not (tmp_path / "r").exists()


def test_a_scripted_run_warns_once_of_the_replies_it_cut(tmp_path):
    """quickstart.srpo (builtin:tiny, whose tokenizer ships): the solvers' max_tokens = 12 counts tiny's
    tokens. Two episodes, each with one long solver reply (cut) and one short: one line, 2 replies.
    math_fixed.srpo names a hub model not on this machine: bytes, and the line says so."""
    long = "\\boxed{4} because four is the answer to this one"
    script = {
        "solver": [long, "\\boxed{4}"],
        "verifier": ["<verify>approve</verify>"],
        "*": ["FINAL: \\boxed{4}"],
    }
    done = cli(
        "run",
        "workflows/quickstart.srpo",
        "--backend",
        "scripted",
        "--model",
        _script(tmp_path, script),
        "--limit",
        "2",
        "--out",
        tmp_path / "q",
    )
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert done.returncode == 0 and warnings == [
        "warning: the scripted backend cut 2 replies at their agent's max_tokens (counted in tiny-v1's tokens): "
        "raise max_tokens or shorten the replies"
    ], done.stderr
    traces = [json.loads(x) for x in (tmp_path / "q" / "traces.jsonl").read_text().splitlines()]
    first = traces[0]["events"][0]["members"][0]  # the long reply, cut at 12 of tiny's tokens
    assert (
        len(first["response_token_ids"]) == 12
        and long.startswith(first["text"].strip())
        and first["text"] != long
    )
    whole = cli(
        "run",
        "workflows/math_fixed.srpo",
        "--backend",
        "scripted",
        "--model",
        _script(tmp_path),
        "--limit",
        "1",
        "--out",
        tmp_path / "m",
    )
    assert whole.returncode == 0 and "warning" not in whole.stderr
    (tmp_path / "a.j2").write_text("{{ task.question }}")
    (tmp_path / "w.srpo").write_text(
        'workflow w\npolicy lm = hf("srpo-dsl-tests/not-here") with (max_tokens = 5)\n'
        'task arith(n = 4, eval_n = 2)\nagent a uses lm prompt "a.j2" emits boxed\naggregate a\n'
        "reward exact_match(a, task.answer)\n"
    )
    args = ("--backend", "scripted", "--model", _script(tmp_path, {"a": ["\\boxed{12345}"]}), "--limit", "2")
    cut = cli("run", tmp_path / "w.srpo", *args, "--out", tmp_path / "c")  # 12 bytes, cut at 5
    assert (
        cut.returncode == 0
        and "cut 2 replies at their agent's max_tokens (counted in UTF-8 bytes)" in cut.stderr
    )
