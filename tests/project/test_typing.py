"""The types (docs/architecture.md, "Types"): `mypy` checks the compiler, the runtime and the objective
strictly in CI (pyproject.toml's [tool.mypy]); everywhere `Any` stays rare."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "srpo_dsl"
MOST_ANY = 100  # lines of srpo_dsl naming `Any` (an import line counts)


def test_any_is_named_on_at_most_100_lines() -> None:
    lines = {
        (path, token.start[0])
        for path in PACKAGE.rglob("*.py")
        for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        if token.type == tokenize.NAME and token.string == "Any"
    }
    assert len(lines) <= MOST_ANY, f"{len(lines)} lines name Any"


def test_mypy_checks_the_compiler_the_runtime_and_the_objective_strictly() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["strict"] is True
    assert config["files"] == ["srpo_dsl/lang", "srpo_dsl/runtime", "srpo_dsl/rl/objective"]
    assert "\nmypy > " in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
