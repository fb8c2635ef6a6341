"""bench/adapters_bench.py: its team workflows compile to the layouts it claims, its ratios are the
documented ones, and `--quick` runs end to end with the parameter bytes of each layout exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from srpo_dsl.lang import analyze
from tests.support import clitools

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "adapters_bench.py"
MIB = 2**20


def load_bench():
    return clitools.load_bench("adapters_bench")


@pytest.mark.parametrize("roles", [1, 3])
def test_team_workflows_have_the_claimed_layouts(roles):
    bench = load_bench()
    graphs = {}
    for kind in bench.KINDS:
        result = analyze(bench.team_text(kind, roles, "/models/m"), "team.srpo", [ROOT / "workflows"])
        assert result.program is not None, [str(d) for d in result.diagnostics]
        graphs[kind] = result.program
        assert len(result.program.event_nodes) == roles
    trainable = {k: sorted(n for n, p in g.policies.items() if p.trainable) for k, g in graphs.items()}
    assert trainable["full"] == [f"p{k}" for k in range(1, roles + 1)]
    assert trainable["shared"] == ["lm"]
    assert trainable["base"] == []
    assert len(graphs["adapters"].adapters_on("base")) == roles
    assert not graphs["adapters"].policies["base"].trainable
    assert {p.model for g in graphs.values() for p in g.policies.values() if p.base is None} == {"/models/m"}


def test_ratio_table_is_against_base_rss_plus_four_times_the_adapters():
    bench = load_bench()

    def row(kind, rss_mib, trainable_mib=0):
        return {
            "kind": kind,
            "roles": 3,
            "peak_rss_bytes": rss_mib * MIB,
            "trainable_bytes": trainable_mib * MIB,
        }

    rows = [row("full", 3276), row("shared", 1500), row("adapters", 1092, 10), row("base", 1000)]
    # reference = 1000 + 4 x 10 = 1040 MiB; 1092 / 1040 = 1.05; 3276 / 1092 = 3.00
    assert bench.ratio_table(rows)[-1] == "| 3 | 1,040.0 | 1.050 | 3.00 |"
    # one shared LoRA: 1060 MiB with 10/3 MiB of adapter: 1060 + 4 x 20/3 = 1086.7; 1092 / 1086.7 = 1.005
    with_lora = [*rows, row("lora", 1060, 10 / 3)]
    assert bench.ratio_table(with_lora)[-1] == "| 3 | 1,040.0 | 1.050 | 3.00 | 1.005 |"


@pytest.mark.slow
def test_quick_run_measures_every_layout(tmp_path):
    out = tmp_path / "result.json"
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--quick",
        "--threads",
        "1",
        "--cache",
        str(tmp_path),
        "--json",
        str(out),
    ]
    launched = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # set by earlier tests
    env = {k: v for k, v in os.environ.items() if k not in launched}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    # the quick model is the embedded model's shape: hidden 128, 2 layers, MLP 256, its vocabulary (tied)
    vocab = json.loads((ROOT / "srpo_dsl/models/tiny-v1/config.json").read_text())["vocab_size"]
    assert vocab == 384  # the tokenizer trained on the quickstart's and the tool agent's transcripts
    base = 4 * (vocab * 128 + 2 * (4 * 128 * 128 + 3 * 128 * 256 + 2 * 128) + 128)  # 1,509,888 bytes
    lora = 4 * 2 * 16 * (4 * (128 + 128) + 3 * (128 + 256))  # r = 16 on all 7 linears of 2 layers
    expected = {  # kind: (parameter bytes, trainable bytes, engines) with 2 roles
        "full": (2 * base, 2 * base, 2),
        "shared": (base, base, 1),
        "lora": (base + lora, lora, 1),
        "adapters": (base + 2 * lora, 2 * lora, 1),
        "base": (base, 0, 0),
    }
    rows = {r["kind"]: r for r in result["memory"]}
    assert sorted(rows) == sorted(expected) and {r["roles"] for r in rows.values()} == {2}
    for kind, (params, trainable, engines) in expected.items():
        r = rows[kind]
        assert (r["param_bytes"], r["trainable_bytes"], r["engines"]) == (params, trainable, engines), kind
        assert r["adamw_bytes"] == 2 * trainable  # exp_avg and exp_avg_sq of every trainable parameter
        assert r["peak_rss_bytes"] > params and r["peak_gpu_bytes"] is None
        assert len(r["step_times"]) == (0 if kind == "base" else 1)
    for side in ("shared", "adapters"):
        (run,) = result["steptime"][side]
        assert len(run["step_times"]) == len(run["tokens"]) == 2 and min(run["tokens"]) > 0
    gen = result["generation"]
    assert (gen["requests"], gen["adapters"]) == (3 * 4 * 2, 3)
    for way in ("mixed", "per_adapter"):
        assert len(gen["runs"][way]["seconds"]) == 2 and min(gen["runs"][way]["tokens"]) > 0
    for title in ("| roles | layout |", "| roles | one base + adapters", "| team |", "| way | calls |"):
        assert title in proc.stdout
