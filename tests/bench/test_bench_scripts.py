"""Every script of bench/ imports (so a rename inside the package cannot leave one broken unnoticed), and
runs in its smoke mode (one step, tiny shapes) printing its figures, so a bench cannot silently break.

A new bench needs a `--smoke` flag and an entry in FIGURES (a line its smoke output must hold), or an
entry in ELSEWHERE naming the test that runs it. The bench extra (trl) is needed by train_bench.py: its
smoke run skips without it, unless SRPO_DSL_BENCH_TESTS=required (CI), where it fails.
"""

import importlib.util
import os
import re
import subprocess
import sys
import time

import pytest

from tests.support.clitools import ROOT, load_bench
from tests.support.training import train_env

BENCH = ROOT / "bench"
# the scripts: every bench/*.py a user runs (bench/lsp_client.py, which they share with the tests, is not one)
NAMES = sorted(p.stem for p in BENCH.glob("*.py") if '__name__ == "__main__"' in p.read_text())
REQUIRED = os.environ.get("SRPO_DSL_BENCH_TESTS") == "required"

# bench -> (the test file that runs it end to end, the flag it runs it with)
ELSEWHERE = {
    "adapters_bench": ("test_adapters_bench.py", "--quick"),
    "gpu_bench": ("test_gpu_bench.py", "--cpu"),
    "logits_memory_bench": ("test_chunked_head.py", "--smoke"),
    "paper_cost": ("test_paper_cost.py", "--fill"),  # no model: its whole run takes a second
}
AS_IS = {"train_path"}  # its whole run is one step of 2 prompts x 2: it runs without a flag
NEEDS = {"train_bench": "trl"}  # bench -> the module of the `bench` extra it needs
FIGURES = {  # bench -> a line of figures its smoke run prints (a regular expression)
    "decode_bench": r"^\| static \| \d+\.\d+ \| [\d,.]+ \| \d+\.\d+ \| 0 \| 0\.0 \|$",
    "compile_bench": r"^\| 10 \| 100 \| [\d,]+ \| [\d,]+ \| \d+\.\d{3} \| \d+\.\d{3} \| [\d.]+ \| [\d.]+ \|$",
    "fuzz_report": r"^\| workflows \| 10( \| 0){6} \| \d+ \|$",
    "lsp_bench": r"^didChange -> publishDiagnostics over 1 workflows: median of medians \d+\.\d ms",
    "lsp_scale": r"^\| code lens \| raw stdio \| \d+\.\d \| – \|$",
    "multiturn_bench": r"^\| quickstart_tools \| 2 \| conversation, stream \| \d+ \| \d+ \| \d+ \| \d\.\d{3} \|",
    "objective_bench": r"^\| 8 \|( \d+\.\d \|)+ \d+\.\d\d \|$",
    "packing_bench": r"^\| one long member \| budget 64 \(\d+\) \| packed \| [\d,]+ \| \d+\.\d% \| \d+\.\d{3} \|$",
    "quickstart_tools": r"^\| all( \| \d+\.\d -> \d+\.\d){5} \|$",
    "rollout_bench": r"^\| ratio executor/raw \| \| \d+\.\d{3} \| \d+\.\d{3} \|$",
    "taskfile_bench": r"^\| 4 MB \| 100,000 \| \d+\.\d\d \| \d+\.\d \| \d+\.\d \| \d+ \| 0 \|$",
    "sweep_bench": r"^\| async_s2 \| [\d.]+ ± 0 \| [\d.]+× \|",
    "train_bench": r"^\| TRL GRPOTrainer [\d.]+ \| 1 \| \d+\.\d\d \| \d+\.\d\d \| \d+ \| \d+ \|",
    "train_path": r"^files run before the first optimizer step +\d+$",
}


@pytest.mark.parametrize("name", NAMES)
def test_the_bench_script_imports(name):
    module = load_bench(name)
    assert callable(getattr(module, "main", None)), f"bench/{name}.py has no main()"


@pytest.mark.parametrize("name", sorted(ELSEWHERE))
def test_a_bench_run_elsewhere_is_run_there(name):
    test, flag = ELSEWHERE[name]
    (path,) = (ROOT / "tests").glob(f"*/{test}")
    text = path.read_text()
    assert f"{name}.py" in text and f'"{flag}"' in text, f"{path} does not run bench/{name}.py {flag}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in NAMES if n not in ELSEWHERE])
def test_the_bench_runs_in_smoke_mode_and_prints_its_figures(name):
    assert name in FIGURES, f"bench/{name}.py: give it a --smoke mode and its figures a line in FIGURES"
    module = NEEDS.get(name)
    if module and importlib.util.find_spec(module) is None:
        reason = f"bench/{name}.py needs {module} (pip install '.[bench]')"
        if REQUIRED:
            pytest.fail(reason + ", and SRPO_DSL_BENCH_TESTS=required")
        pytest.skip(reason)
    argv = [sys.executable, str(BENCH / f"{name}.py"), *([] if name in AS_IS else ["--smoke"])]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600, env=train_env())
    print(f"bench/{name}.py smoke: {time.perf_counter() - start:.1f} s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(FIGURES[name], done.stdout, re.MULTILINE), done.stdout[-3000:]
    assert "nan" not in done.stdout.lower().split(), done.stdout[-3000:]
    if name == "lsp_scale":
        editor_clients_timed(done.stdout)


def editor_clients_timed(stdout: str) -> None:
    """lsp_scale's smoke run times code lens in Neovim and the VS Code client, or says why it skipped
    one (node or Neovim missing): a failure with SRPO_DSL_BENCH_TESTS=required (CI installs both)."""
    for client in ("Neovim", "VS Code client"):
        skipped = re.search(rf"^{client}: skipped, .+$", stdout, re.MULTILINE)
        if skipped and REQUIRED:
            pytest.fail(f"{skipped.group(0)}, and SRPO_DSL_BENCH_TESTS=required")
        timed = re.search(rf"^\| code lens \| {client} \| \d+\.\d \| – \|$", stdout, re.MULTILINE)
        assert skipped or timed, stdout[-3000:]


def test_train_path_measures_its_own_checkout_or_says_it_cannot(tmp_path):
    """With `srpo_dsl` imported from another copy (an editable install elsewhere) the profile hook would see
    none of this checkout's files and print zeros: it stops with one line instead."""
    other = tmp_path / "srpo_dsl"
    other.mkdir()
    (other / "__init__.py").write_text("")
    script = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import srpo_dsl, runpy; "
    script += f"runpy.run_path({str(BENCH / 'train_path.py')!r}, run_name='__main__')"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 1 and done.stdout == ""
    assert (
        done.stderr
        == f"error: srpo_dsl was imported from {other.resolve()}, not from this checkout ({ROOT / 'srpo_dsl'}): nothing to measure\n"
    )
