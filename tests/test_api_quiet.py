"""The libraries' noise the API hides as the CLI does: here, what a notebook shows and a terminal does not."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from srpo_dsl.api.quiet import libraries_quiet

ROOT = Path(__file__).resolve().parents[1]


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
