"""A large .jsonl task file: how long `srpo-dsl train` takes to its first step, and its peak memory.

Writes a JSON-lines task file of `--mb` megabytes (default 1024: about 6.6 million rows of ~160 bytes,
unique ids) in a temporary folder, next to a quickstart-style workflow that reads it (`task math(data =
"tasks.jsonl")`, the embedded tiny model, one step of 2 prompts x 2), runs `srpo-dsl train --steps 1`
in a child process, and reports:

- the seconds until the run prints `step 1:` (its first optimizer step done), and in all;
- the child's peak resident memory (`os.wait4`'s rusage: this child alone);
- in this process: the seconds to open the file (`open_tasks`: the line index), and with `--check`
  to parse and normalize every row once (a whole-file check, in bounded memory).

`--code DIR` runs the child on another checkout's `srpo_dsl` (e.g. an older commit exported with
`git archive`) for a before/after; `--timeout S` stops a child that has not finished. The folder and
the file are deleted afterwards.

    python bench/taskfile_bench.py                 # 1 GB
    python bench/taskfile_bench.py --mb 100 --code /tmp/old
    python bench/taskfile_bench.py --smoke         # 4 MB
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "workflows" / "quickstart"
WORKFLOW = """workflow big
policy lm = builtin("tiny") with (temperature = 1.0)
task math(data = "tasks.jsonl")
agent solver[2]  uses lm prompt "solver.j2"     emits boxed                    with (max_tokens = 8)
agent verifier   uses lm prompt "verifier.j2"   emits verdict(approve, reject) with (max_tokens = 4)
agent aggregator uses lm prompt "aggregator.j2" emits final_boxed              with (max_tokens = 8)
parallel solver
verify verifier
aggregate aggregator
reward exact_match(aggregator, task.answer) invalid -0.1
train with (group = 2, batch = 2, steps = 1, eval_size = 2, eval_k = 1, eval_every = 100, save_every = 100)
"""
ROWS_PER_WRITE = 100_000


def write_tasks(path: Path, megabytes: float) -> int:
    """Rows `{"id", "question", "answer", "source"}` (~160 bytes each) until the file holds `megabytes`."""
    target, rows, size = int(megabytes * (1 << 20)), 0, 0
    tail = ', "source": "synthetic additions, written by bench/taskfile_bench.py for its timing"}\n'
    with path.open("w", encoding="utf-8") as f:
        while size < target:
            lines = [
                f'{{"id": "r{i}", "question": "What is {i % 997} + {i % 89}?", "answer": "{i % 997 + i % 89}"'
                + tail
                for i in range(rows, rows + ROWS_PER_WRITE)
            ]
            text = "".join(lines)
            f.write(text)
            rows, size = rows + len(lines), size + len(text)
    return rows


def run_train(folder: Path, code: Path, timeout: float) -> dict:
    """One `srpo-dsl train --steps 1` child: seconds to `step 1:`, in all, its peak RSS and exit code."""
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    argv = [sys.executable, "-m", "srpo_dsl", "train", str(folder / "big.srpo"), "--device", "cpu"]
    began, first = time.perf_counter(), None
    child = subprocess.Popen(
        [*argv, "--out", str(folder / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=folder,
    )
    assert child.stdout is not None
    deadline, seen = began + timeout, b""
    os.set_blocking(child.stdout.fileno(), False)
    while True:  # `os.wait4` reaps the child and gives its own rusage (not `Popen.poll`'s)
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        seen += child.stdout.read() or b""
        if first is None and b"step 1:" in seen:
            first = time.perf_counter() - began
        if pid:
            break
        if time.perf_counter() > deadline:
            child.kill()
            _, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    child.returncode = os.waitstatus_to_exitcode(status)
    total = time.perf_counter() - began
    peak = usage.ru_maxrss / 1024
    return {"first_step_s": first, "total_s": total, "peak_rss_mb": peak, "rc": child.returncode}


def open_figures(path: Path, check: bool) -> dict:
    """In this process: the seconds to open the file as a run does, its rows and (`check`) the seconds
    to parse and normalize every row once, one at a time (what a whole-file check would cost)."""
    from srpo_dsl.envs.data import open_tasks

    began = time.perf_counter()
    tasks = open_tasks(path, kind="math")
    figures = {"open_s": time.perf_counter() - began, "rows": len(tasks)}
    if check:
        began = time.perf_counter()
        for _ in tasks:
            pass
        figures["check_s"] = time.perf_counter() - began
    return figures


def report(figures: dict) -> None:
    first = figures["first_step_s"]
    print("| file | rows | open (s) | first step (s) | all (s) | peak RSS (MB) | exit |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {figures['mb']:.0f} MB | {figures['rows']:,} | {figures['open_s']:.2f} | "
        f"{'—' if first is None else f'{first:.1f}'} | {figures['total_s']:.1f} | "
        f"{figures['peak_rss_mb']:.0f} | {figures['rc']} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1024.0, help="the task file's size in megabytes")
    parser.add_argument("--smoke", action="store_true", help="a 4 MB file")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose srpo_dsl the child runs")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before the child is stopped")
    parser.add_argument("--check", action="store_true", help="also time reading every row once")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object too")
    args = parser.parse_args()
    megabytes = 4.0 if args.smoke else args.mb
    folder = Path(tempfile.mkdtemp(prefix="taskfile-bench-"))
    try:
        for name in ("solver.j2", "verifier.j2", "aggregator.j2"):
            shutil.copy(PROMPTS / name, folder / name)
        (folder / "big.srpo").write_text(WORKFLOW)
        write_tasks(folder / "tasks.jsonl", megabytes)
        figures = {"mb": megabytes, **run_train(folder, args.code.resolve(), args.timeout)}
        figures |= open_figures(folder / "tasks.jsonl", args.check)  # after: the child forks a small process
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report(figures)
    if "check_s" in figures:
        print(f"every row parsed and normalized once: {figures['check_s']:.1f} s")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
