"""A Python-execution tool and a shaped reward, written as a user of srpo-dsl writes them.

`math_python.srpo` names two functions of this file:

- `run_python(queries, time_limit, memory_mb)`: the tool. Each query is a program; each
  runs in its own subprocess (`python -I`, an empty temporary folder, no inherited
  environment, CPU-time and memory limits, killed after `time_limit` seconds), all of a
  batch at once. The observation is the program's output, or its error's last line. This
  bounds runaway programs; it is not a security boundary: run untrusted code in a container.
- `reward(answer, row, episode)`: math equivalence with the gold answer, minus 0.1 for each
  program that failed to run (a trajectory-level shaping read off the episode's observations).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from srpo_dsl.envs.math import math_equiv

MAX_OUTPUT = 2000  # characters of output an observation keeps


def _limits(time_limit: float, memory_mb: int):
    def apply() -> None:  # runs in the child before it starts Python
        resource.setrlimit(resource.RLIMIT_CPU, (int(time_limit) + 1, int(time_limit) + 1))
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))

    return apply


def _run_one(code: str, time_limit: float, memory_mb: int) -> str:
    with tempfile.TemporaryDirectory(prefix="srpo-python-") as folder:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", code],
                cwd=folder,
                env={"PATH": os.defpath},
                capture_output=True,
                text=True,
                timeout=time_limit,
                preexec_fn=_limits(time_limit, memory_mb),
            )
        except subprocess.TimeoutExpired:
            return f"error: the program did not finish within {time_limit:g} s"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return f"error: {lines[-1] if lines else f'exit code {done.returncode}'}"[:MAX_OUTPUT]
    return done.stdout.strip()[:MAX_OUTPUT] or "(no output: print the result)"


def run_python(queries: list[str], time_limit: float = 5.0, memory_mb: int = 512) -> list[str]:
    """Run every program of the batch at once; one output (or `error: ...`) per program."""
    with ThreadPoolExecutor(max_workers=min(8, max(len(queries), 1))) as pool:
        return list(pool.map(lambda code: _run_one(code, time_limit, memory_mb), queries))


def reward(answer: str | None, row: dict, episode) -> float:
    """1.0 for the right answer, minus 0.1 per program that failed."""
    failed = sum(
        str(o.get("result", "")).startswith("error:") for e in episode.events for o in e.observations
    )
    correct = answer is not None and any(math_equiv(str(answer), gold) for gold in row["answers"])
    return float(correct) - 0.1 * failed
