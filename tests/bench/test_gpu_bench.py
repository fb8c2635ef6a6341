"""bench/gpu_bench.py: its records and rows come back whatever happens to the run (every part's when no
case can start; the finished ones, steps included, when it is killed mid-way, in its CPU mode), and its
derived figures (update tokens/s, MFU, rollout tokens/s, budgets) are the arithmetic its docstring states."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support import clitools
from tests.support.clitools import ROOT
from tests.support.training import train_env

SCRIPT = ROOT / "bench" / "gpu_bench.py"


def load_bench():
    return clitools.load_bench("gpu_bench")  # (puts bench/ on sys.path: gpubench imports after it)


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def cases(path):
    return {(r["part"], r["case"]): r for r in records(path) if r["kind"] == "case"}


def test_update_figures_are_the_stated_arithmetic():
    load_bench()
    from gpubench.figures import update_figures
    from gpubench.report import row

    steps = [  # two steps; the first (warm-up) is left out of every median
        {"rows": 10, "response_tokens": 100.0, "step_s": 9.0, "update_s": 5.0, "peak_gib": 3.0},
        {"rows": 10, "response_tokens": 100.0, "step_s": 2.0, "update_s": 0.5, "peak_gib": 3.25},
    ]
    f = update_figures(steps, prompt_tokens=5.0, params=10**9, peak_flops=1e15)
    # update tokens: 10 rows x 5 prompt tokens + 100 = 150 per step; 150 / 0.5 s = 300 tokens/s
    # MFU: 6 x 1e9 x 300 / 1e15 = 0.18%; rollout: 100 tokens / (2.0 - 0.5) s = 67 tokens/s; 100 / 2.0 s = 50
    assert (
        f["update_tokens_per_s"] == 300 and f["mfu"] == pytest.approx(1.8e-3) and f["step_tokens_per_s"] == 50
    )
    done = {"status": "done", "figures": f | {"planned": 2}}
    assert row("update", "x", done) == "| x | 2 | 2000 | 500 | 300 | 0.2% | 67 | 3.2 |"
    # a case stopped after 1 of 4 steps: that step's figures, then why it stopped
    cut = {
        "status": "stopped",
        "note": "the bench got SIGTERM",
        "figures": update_figures(steps[:1], 5.0, 10**9, None),
    }
    cut["figures"]["planned"] = 4
    assert (
        row("update", "x", cut)
        == "| x | 1 of 4, then stopped: the bench got SIGTERM | 9000 | 5000 | 30 | n/a | 25 | 3.0 |"
    )


def test_rollout_rows_show_the_engines_decode_statistics_where_it_reports_them():
    load_bench()
    from gpubench.report import header, rollout_ratios, row

    assert (
        header("rollout", stats=True)
        .splitlines()[0]
        .endswith("| compile s | decode shapes | static caches GiB |")
    )
    base = {"first_seconds": 84.2, "seconds": 2.37, "tokens": 65536, "tokens_per_s": 27640.0}
    ours = base | {"first_seconds": 46.0, "tokens_per_s": 17905.0, "compile_s": 41.5, "decode_shapes": 2,
                   "cache_bytes": 3 * 2**29}  # fmt: skip
    assert row("rollout", "e", {"status": "done", "figures": ours}, stats=True) == (
        "| e | 46.00 | 2.37 | 65536 | 17,905 | 41.5 | 2 | 1.50 |"
    )
    assert row("rollout", "g", {"status": "done", "figures": base}, stats=True) == (
        "| g | 84.20 | 2.37 | 65536 | 27,640 | | | |"
    )
    skipped = {"status": "skipped", "note": "needs about 90 s, 10 s of --budget-s left"}
    assert row("rollout", "g", skipped) == "| g | skipped: needs about 90 s, 10 s of --budget-s left | | | |"
    done = {
        "hf_compiled": {"status": "done", "figures": ours},
        "generate_static": {"status": "done", "figures": base},
    }
    assert rollout_ratios(done) == [  # 17,905 / 27,640
        "srpo-dsl hf engine, decode compiled / transformers generate (static cache; compiled on CUDA): 0.65×"
    ]


def test_async_rows_are_each_cells_rate_against_sync():
    load_bench()
    from gpubench.figures import async_figures
    from gpubench.report import row

    steps = [{"elapsed_s": t, "staleness": s} for t, s in ((10.0, None), (12.0, 1.0), (14.0, 0.0))]
    f = async_figures(steps) | {"planned": 3}
    assert f["steps_per_s"] == 0.5 and f["staleness"] == 0.5  # 2 steps after the first in 4 s
    assert row("async", "async S=1", {"status": "done", "figures": f}, base=0.25) == (
        "| async S=1 | 3 | 0.500 | 2.00× | 0.50 |"
    )
    failed = {"status": "failed", "note": "exit 1, out of GPU memory"}
    assert row("async", "async S=2", failed) == "| async S=2 | failed: exit 1, out of GPU memory | | | |"


def test_a_case_is_skipped_when_its_expected_time_exceeds_what_is_left():
    load_bench()
    from gpubench import budget

    # issue 46's H200 figures: first call 46.0 s + one timed call 3.7 s at 0.6B, 512 rows x 128 tokens; at
    # 1.7B (1,720,574,976 parameters against 596,049,920), half the rows, two timed calls
    assert budget.rollout_s("hf_compiled", "0.6b", 512, 128, 1) == pytest.approx(49.7)
    timed = 2 * 3.7 * 1_720_574_976 / 596_049_920 / 2
    assert budget.rollout_s("hf_compiled", "1.7b", 256, 128, 2) == pytest.approx(46.0 + timed)
    gpu, cpu = budget.Clock(100, "cuda"), budget.Clock(100, "cpu")
    assert gpu.gate(50) is None and cpu.gate(500) is None  # on CPU the H200's estimates do not apply
    assert gpu.gate(500) == "needs about 500 s, 100 s of --budget-s left"
    assert budget.Clock(0, "cpu").gate(0) == "the --budget-s time ran out"
    gpu.signal = signal.SIGTERM
    assert gpu.gate(0) == gpu.stop_reason() == "the bench got SIGTERM" and gpu.exit_code() == 143


@pytest.mark.parametrize("size", ["0.6b", "1.7b", "4b"])
def test_each_shapes_parameter_count_is_its_models(size):
    """The count the estimates scale by is the built model's (0.6B: 596,049,920, as counted on the GPU in
    November), here built on the meta device."""
    load_bench()
    import torch
    from gpubench.shapes import SIZES, VOCAB, parameters
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(vocab_size=VOCAB, tie_word_embeddings=True, **SIZES[size]))
    assert parameters(size) == sum(p.numel() for p in model.parameters())
    assert parameters("0.6b") == 596_049_920


def test_a_case_past_the_budget_is_stopped_with_its_whole_process_group(tmp_path):
    load_bench()
    from gpubench.budget import Clock
    from gpubench.procs import run_child

    pid_file = tmp_path / "grandchild"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    t0 = time.monotonic()
    outcome = run_child([sys.executable, "-c", code], tmp_path / "log", Clock(1.5, "cpu"))
    assert outcome.status == "stopped" and outcome.note == "the --budget-s time ran out"
    assert time.monotonic() - t0 < 15
    grandchild = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # gone with its group (reaped by init once killed)
        for _ in range(50):
            os.kill(grandchild, 0)
            time.sleep(0.1)


def test_a_json_lines_tail_hands_over_complete_lines_only(tmp_path):
    load_bench()
    from gpubench.train import Tail

    path, seen = tmp_path / "metrics.jsonl", []
    tail = Tail(path, seen.append)
    tail()  # no file yet
    path.write_text('{"step": 1}\n{"step": 2')  # the second line half written
    tail()
    assert seen == [{"step": 1}]
    with path.open("a") as f:
        f.write("}\n")
    tail()
    assert seen == [{"step": 1}, {"step": 2}]


def test_options_reach_every_trained_part_and_a_budget_replaces_the_count():
    load_bench()
    from gpubench.parts import micro_batching

    assert micro_batching({"team_micro_batches": 8, "options": {}}) == {"micro_batches": 8}
    budget = {"max_tokens_per_micro_batch": "16384", "pack_rows": "true"}
    assert micro_batching({"team_micro_batches": 8, "options": budget}) == budget


def test_the_lora_shape_trains_adapters_on_a_frozen_base(tmp_path):
    """The 4B shape's workflow declares LoRA on its policy, and checks clean."""
    load_bench()
    from gpubench.parts import LORA, SOLVER, write_workflow

    from srpo_dsl.lang import analyze

    sizes = {"TOKENS": 8, "GROUP": 2, "BATCH": 4}
    path = write_workflow(tmp_path, SOLVER, tmp_path / "model", sizes, lora="4b" in LORA)
    text = path.read_text()
    assert "lora(r = 16, alpha = 32)" in text
    result = analyze(text, str(path))
    assert result.diagnostics == [] and result.program.policies["lm"].lora["r"] == 16


def test_with_no_time_every_part_records_and_prints_its_skipped_cases(tmp_path):
    """`--budget-s 0`: no case starts (not even the model's build); every case of every part still has its
    record and its row, and the run exits 0."""
    out = tmp_path / "gpu.jsonl"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu", "--budget-s", "0", "--zero", "0,3", "--json", out],
        capture_output=True, text=True, timeout=300, env=train_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = cases(out)
    rollout = ["hf_compiled", "generate_static", "generate", "hf_static"]  # the default generators
    expected = [("build", "model"), *(("rollout", g) for g in rollout), ("update", "ZeRO-0"), ("update", "ZeRO-3"),
                ("long", "ZeRO-0"), ("trl", "trl"), ("team", "team"), ("async", "sync"), ("async", "async S=1"),
                ("async", "async S=2")]  # fmt: skip
    assert list(found) == expected  # in the order the parts run
    assert {r["status"] for r in found.values()} == {"skipped"}
    assert all(r["device"] == "cpu" and "commit" in r and r["size"] == "tiny" for r in found.values())
    rows = [line for line in done.stdout.splitlines() if "| skipped: " in line]
    assert len(rows) == len(expected) - 1  # the build's line is not a table row
    assert "| srpo-dsl ZeRO-3 | skipped: the --budget-s time ran out |" in done.stdout
    assert "| async S=2 | skipped: " in done.stdout


@pytest.mark.slow
def test_a_run_killed_mid_way_keeps_every_finished_record_and_row(tmp_path):
    """CPU mode, the rollout part (two generators) then a long update: SIGTERM as soon as the first training
    step is recorded. The rollout records, the finished steps and the update's figures over them stay in the
    JSON Lines file, their rows were printed, the parts after it are recorded as skipped, and no process of
    the run is left."""
    out = tmp_path / "gpu.jsonl"
    cmd = [sys.executable, str(SCRIPT), "--cpu", "--parts", "rollout,update,long", "--generators", "hf_static,generate",
           "--steps", "1000", "--batch", "2", "--tokens", "4", "--json", str(out)]  # fmt: skip
    env = train_env() | {
        "TMPDIR": str(tmp_path)
    }  # the run's scratch folder, so that its processes can be found
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while not (out.exists() and any(r["kind"] == "step" for r in records(out))):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    found = cases(out)
    for generator in ("hf_static", "generate"):
        rollout = found[("rollout", generator)]
        assert (
            rollout["status"] == "done" and 0 < rollout["figures"]["tokens"] <= 4 * 2 * 4
        )  # a row may end early
    steps = [r["figures"] for r in records(out) if r["kind"] == "step"]
    update = found[("update", "ZeRO-0")]
    assert update["status"] == "stopped" and update["note"] == "the bench got SIGTERM"
    assert 1 <= update["figures"]["steps"] == len(steps) < 1000 and [s["step"] for s in steps] == list(
        range(1, len(steps) + 1)
    )
    assert found[("long", "ZeRO-0")]["status"] == "skipped"
    assert (
        "| srpo-dsl hf engine, decode static | " in stdout
        and "| transformers generate (dynamic cache) | " in stdout
    )
    assert f"| srpo-dsl ZeRO-0 | {len(steps)} of 1000, then stopped: the bench got SIGTERM |" in stdout
    assert "| srpo-dsl ZeRO-0, 4 × 512 | skipped: the bench got SIGTERM |" in stdout
    for _ in range(50):  # (a process killed a moment ago may still be on its way out)
        leftover = subprocess.run(["pgrep", "-af", str(tmp_path)], capture_output=True, text=True).stdout
        if not leftover:
            break
        time.sleep(0.1)
    assert leftover == "", leftover
