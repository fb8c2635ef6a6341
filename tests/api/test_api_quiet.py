"""The libraries' noise the API hides as the CLI does: here, what a notebook shows and a terminal does not."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from srpo_dsl.api.quiet import libraries_quiet

ROOT = Path(__file__).resolve().parents[2]


def test_srpo_dsl_never_imports_tqdms_notebook_switch() -> None:
    """`tqdm.auto` in a notebook imports tqdm.autonotebook, which warns (TqdmExperimentalWarning)."""
    sources = sorted((ROOT / "srpo_dsl").rglob("*.py"))
    found = [
        p.name
        for p in sources
        if re.search(r"(from|import) tqdm\.(auto|autonotebook)\b", p.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_libraries_quiet_hides_tqdms_warnings() -> None:
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with libraries_quiet(True):
            warnings.warn_explicit(
                "IProgress not found", UserWarning, "notebook.py", 1, module="tqdm.notebook"
            )
    assert shown == []


def test_deepspeeds_compiler_probe_is_hidden_when_stderr_is_not_fd_2(tmp_path: Path) -> None:
    """As in a notebook, whose sys.stderr is a copy of descriptor 2: DeepSpeed's libaio probe (`/usr/bin/ld:
    cannot find -laio ... collect2`) still goes nowhere, while srpo-dsl's own lines on sys.stderr show."""
    import os
    import subprocess
    import sys

    script = tmp_path / "notebook.py"
    script.write_text(
        "import io, os, sys\n"
        "sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), 'wb', buffering=0), write_through=True)\n"
        "from srpo_dsl.api.quiet import libraries_quiet\n"
        "from deepspeed.ops.op_builder.async_io import AsyncIOBuilder\n"
        "with libraries_quiet(True):\n"
        "    AsyncIOBuilder().has_function('io_submit', ('aio',))\n"
        "    sys.stderr.write('own progress\\n')\n"
    )
    env = os.environ | {"PYTHONPATH": str(ROOT), "DS_ACCELERATOR": "cpu"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "own progress\n" in done.stderr
    assert "laio" not in done.stderr and "collect2" not in done.stderr
