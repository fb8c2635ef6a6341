"""Parse, check and compile one workflow text; every problem becomes a diagnostic."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from srpo_dsl.lang.checks.checker import check
from srpo_dsl.lang.compile.compiler import compile_checked
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Diagnostic, SrpoError
from srpo_dsl.lang.syntax.parser import parse

if TYPE_CHECKING:
    import networkx as nx


@dataclass
class Result:
    """What `validate` and `compile` learn about one file."""

    file: str
    source: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    program: EventGraph | None = None
    tree: n.Program | None = None  # the syntax tree (None: the text does not parse)

    @property
    def ok(self) -> bool:
        return not any(d.severity == "error" for d in self.diagnostics)

    @cached_property
    def graph(self) -> nx.DiGraph[str] | None:
        """The compiled program as the documented `networkx.DiGraph` (None when it did not compile)."""
        if self.program is None:
            return None
        with _collector_paused():  # many small dicts that all live on: nothing for the collector to find
            return self.program.to_networkx()


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
    result.tree = program
    checked = check(program, template_dirs)
    result.diagnostics = list(checked.diagnostics)
    if checked.errors:
        return result
    try:
        result.program = compile_checked(checked)
    except SrpoError as err:
        result.diagnostics += err.diagnostics
    return result


def load_graph(path: str | Path) -> EventGraph:
    """Compile a workflow file or raise `SrpoError` with its diagnostics."""
    path = Path(path)
    result = analyze(path.read_text(encoding="utf-8"), str(path))
    if result.program is None:
        raise SrpoError([d for d in result.diagnostics if d.severity == "error"])
    return result.program
