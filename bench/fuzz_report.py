"""The suite's fuzzer (tests/support/fuzzing.py) at scale, its outcomes counted instead of stopping at the first.

    python bench/fuzz_report.py                     # 2,000 workflow cases, 2,000 run-folder cases, seed 48
    python bench/fuzz_report.py --cases 500 --seed 7
    python bench/fuzz_report.py --smoke             # 10 of each (what CI runs)

Each mutated workflow goes through `validate`, `fmt --check` and `compile` in this process and `fmt` through
the Python API; every 20th also through `python -m srpo_dsl` (those three commands, 60 s each) and the
language server (diagnostics, formatting, completion, hover, symbols). Each corrupted run folder goes
through `view`, `audit` and the sweep's two readers. Counted, per target:

- tracebacks, exit 3, hangs (a command past 60 s, a language-server request unanswered in its wait);
- `fmt` not idempotent, or changing the diagnostics (validate before != validate after);
- data lost: a valid workflow whose compiled event graph changes under `fmt`, or whose comments `fmt`
  drops; a run folder whose files a reader changed.

Prints one markdown table (docs/benchmarks.md, "Fuzzing").
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(
    0, str(ROOT)
)  # the suite's fuzzer and checks (tests/support/fuzzing.py, tests/*/test_fuzz_*.py)
PROBLEMS: list[str] = []  # each case's problem, printed below the table (seed and index reproduce it)
KINDS = (
    "cases",
    "tracebacks",
    "exit 3",
    "hangs",
    "fmt not idempotent",
    "fmt changed diagnostics",
    "data lost",
)


def classify(problem: str | None) -> str | None:
    """The column a problem string of the suite's checks counts in."""
    if problem is None:
        return None
    for marker, kind in [("not idempotent", "fmt not idempotent"), ("changed the diagnostics",
                         "fmt changed diagnostics"), ("timed out", "hangs"), ("exit 3", "exit 3")]:  # fmt: skip
        if marker in problem:
            return kind
    return "tracebacks"


def graph_lost(data: bytes) -> bool:
    """A valid workflow whose compiled event graph or comments `fmt` changes."""
    from srpo_dsl.lang.analysis import analyze
    from srpo_dsl.lang.compile.graph_formats import to_json
    from srpo_dsl.lang.syntax.messages import SrpoError
    from srpo_dsl.lang.tooling.format import format_source

    folder = [ROOT / "workflows"]
    try:
        text = data.decode("utf-8")
        before = analyze(text, "w.srpo", folder).graph
        once = format_source(text, "w.srpo")
    except (UnicodeDecodeError, SrpoError):
        return False
    if before is None:
        return False
    after = analyze(once, "w.srpo", folder).graph
    return after is None or to_json(before) != to_json(after) or comments(text) != comments(once)


def comments(text: str) -> list[str]:
    return sorted(
        line.split("#", 1)[1].strip() for line in text.splitlines() if line.lstrip().startswith("#")
    )


def timed_out(problem, *args) -> str | None:
    """`problem(*args)`, a command past its timeout counted as a hang."""
    try:
        return problem(*args)
    except subprocess.TimeoutExpired as exc:
        return f"timed out: {exc}"


def workflows(count: int, lsp_every: int) -> Counter:
    """The workflow targets' counts over `count` cases."""
    from tests.support.fuzz_targets import api_problem, cli_problem, in_subprocess, lsp_problem
    from tests.support.fuzzing import WORKFLOW_OPS, WORKFLOWS, cases, mutate_workflow

    found: Counter = Counter()
    client, folder = language_server(), Path(tempfile.mkdtemp(prefix="srpo-fuzz-"))
    for entry in WORKFLOWS[0].parent.iterdir():
        if entry.suffix != ".srpo":
            (folder / entry.name).symlink_to(entry)
    for case in cases(WORKFLOWS, WORKFLOW_OPS, default=count)[:count]:
        data = mutate_workflow(case)
        checks = [timed_out(api_problem, data), timed_out(cli_problem, data, folder)]
        if case.index % lsp_every == 0:
            checks.append(timed_out(cli_problem, data, folder, in_subprocess))
            checks.append(answered(lsp_problem, client, folder, data, case.index))
        found.update(kind for kind in map(classify, checks) if kind)
        found["data lost"] += graph_lost(data)
        PROBLEMS.extend(
            f"workflow case {case.index} ({case.base.name}): {p.splitlines()[0][:200]}" for p in checks if p
        )
        found["cases"] += 1
    client.close()
    shutil.rmtree(folder, ignore_errors=True)
    return found


def language_server():
    from tests.support.clitools import load_bench

    client = load_bench("lsp_client").LspClient()
    client.initialize(ROOT)
    return client


def answered(lsp_problem, *args) -> str | None:
    """A request the server leaves unanswered is a hang; one answered with an error, a traceback."""
    try:
        return lsp_problem(*args)
    except Exception as exc:  # queue.Empty: no answer in the client's wait; else the server's error
        return f"timed out: {exc}" if type(exc).__name__ == "Empty" else f"language server: {exc}"


def run_folders(count: int) -> Counter:
    """The run-folder targets' counts over `count` cases (readers that change their input: data lost)."""
    from tests.support.fuzz_targets import run_problem
    from tests.support.fuzzing import RUN_FILES, RUN_OPS, cases

    found: Counter = Counter()
    folder = Path(tempfile.mkdtemp(prefix="srpo-fuzz-run-")) / "run"
    for case in cases(RUN_FILES, RUN_OPS, default=count)[:count]:
        problem = run_problem(case, folder)
        changed = digests(folder, case.base.name) != digests_of(case)
        found.update([kind for kind in [classify(problem)] if kind])
        found["data lost"] += changed
        if problem or changed:
            PROBLEMS.append(
                f"run case {case.index} ({case.base.name}): {(problem or 'files changed').splitlines()[0][:200]}"
            )
        found["cases"] += 1
    shutil.rmtree(folder.parent, ignore_errors=True)
    return found


def digests(folder: Path, corrupted: str) -> dict[str, str]:
    """The run folder's files (but what `view` writes) by their SHA-256."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and p.name != "v.html"}  # fmt: skip


def digests_of(case) -> dict[str, str]:
    """What `digests` reads when no reader changed the case's folder: the recorded run, one file corrupted."""
    from tests.support.fuzzing import RUN, corrupt_run

    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(RUN.iterdir()) if p.is_file()}
    return files | {case.base.name: hashlib.sha256(corrupt_run(case)).hexdigest()}


def table(rows: dict[str, Counter], seconds: dict[str, float]) -> str:
    lines = ["| target | " + " | ".join(KINDS) + " | seconds |", "|---" * (len(KINDS) + 2) + "|"]
    for name, found in rows.items():
        lines.append(
            f"| {name} | " + " | ".join(f"{found[k]:,}" for k in KINDS) + f" | {seconds[name]:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000, help="cases per target (workflows, run folders)")
    ap.add_argument("--seed", type=int, default=48)
    ap.add_argument("--smoke", action="store_true", help="10 cases of each (CI)")
    args = ap.parse_args()
    count = 10 if args.smoke else args.cases
    os.environ |= {"SRPO_DSL_FUZZ_SEED": str(args.seed), "SRPO_DSL_FUZZ_CASES": str(count)}  # (tests.fuzzing)
    rows, seconds = {}, {}
    for name, fn in [("workflows", lambda: workflows(count, 20)),
                     ("run folders", lambda: run_folders(count))]:  # fmt: skip
        start = time.perf_counter()
        rows[name] = fn()
        seconds[name] = time.perf_counter() - start
    print(f"seed {args.seed}; every 20th workflow case also on the command line and the language server")
    print(table(rows, seconds))
    print("\n".join(PROBLEMS))


if __name__ == "__main__":
    main()
