"""The language: parse, check and compile `.srpo` workflows into event graphs."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from srpo_dsl.lang.checker import Checked, check
from srpo_dsl.lang.compiler import compile_checked, reward_path_errors
from srpo_dsl.lang.errors import Diagnostic, Span, SrpoError
from srpo_dsl.lang.parser import parse, parse_file


@dataclass
class Result:
    """What `validate` and `compile` learn about one file."""

    file: str
    source: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    graph: nx.DiGraph | None = None

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Analysis allocates many small objects that live until it ends; the cycle collector would rescan them
    over and over (a third of the time on a 10,000-step file). What little cyclic garbage analysis makes
    (exceptions with their frames) is collected once the collector runs again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def analyze(text: str, file: str = "<string>", template_dirs: list[Path] | None = None) -> Result:
    """Parse, check and compile; every problem becomes a diagnostic (never an exception)."""
    with _collector_paused():
        return _analyze(text, file, template_dirs)


def _analyze(text: str, file: str, template_dirs: list[Path] | None) -> Result:
    result = Result(file, text)
    try:
        program = parse(text, file)
    except SrpoError as err:
        result.diagnostics = err.diagnostics
        return result
    checked = check(program, template_dirs)
    result.diagnostics = list(checked.diagnostics)
    if checked.errors:
        return result
    try:
        result.graph = compile_checked(checked)
    except SrpoError as err:
        result.diagnostics += err.diagnostics
    return result


def load_graph(path: str | Path) -> nx.DiGraph:
    """Compile a workflow file or raise `SrpoError` with its diagnostics."""
    path = Path(path)
    result = analyze(path.read_text(encoding="utf-8"), str(path))
    if result.graph is None:
        raise SrpoError([d for d in result.diagnostics if d.severity == "error"])
    return result.graph


__all__ = [
    "Checked",
    "Diagnostic",
    "Result",
    "Span",
    "SrpoError",
    "analyze",
    "check",
    "compile_checked",
    "load_graph",
    "parse",
    "parse_file",
    "reward_path_errors",
]
