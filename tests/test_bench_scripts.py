"""Every script of bench/ imports (so a rename inside the package cannot leave one broken unnoticed)."""

from pathlib import Path

import pytest
from clitools import load_bench

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("*.py")))
def test_the_bench_script_imports(name):
    module = load_bench(name)
    assert callable(getattr(module, "main", None)), f"bench/{name}.py has no main()"
