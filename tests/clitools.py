"""Running the command line as a user does: `python -m srpo_dsl ...` from the project root."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, cwd=ROOT, timeout=300, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "srpo_dsl", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=env,
    )
