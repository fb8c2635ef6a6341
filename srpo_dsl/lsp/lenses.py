"""textDocument/codeLens: above each step, its K range (an event step's: how many replicas act in it)
and the most one execution costs (the compiler's static bounds, as the hover gives them), and how many
times an episode can run it. `srpo.showGraph`: the compiled event graph as Mermaid, as
`srpo-dsl compile --emit mermaid` prints it."""

from __future__ import annotations

from collections.abc import Iterator

from lsprotocol import types as lsp

from srpo_dsl.lang import analyze
from srpo_dsl.lang import nodes as n
from srpo_dsl.lang.compiler import step_cost
from srpo_dsl.lang.graph import EventGraph
from srpo_dsl.lang.graph_formats import export
from srpo_dsl.lsp.costs import cost_text
from srpo_dsl.lsp.positions import span_range
from srpo_dsl.lsp.symbols import parsed

SHOW_GRAPH = "srpo.showGraph"


def _k(step: n.Step, graph: EventGraph) -> str:
    """`K = k` or `K lo..hi` of an event step (over its nodes: a step is one node); "" for other steps."""
    if not isinstance(step, n.EventStep):
        return ""
    here = [
        v.cardinality
        for v in graph.event_nodes
        if (v.where.line, v.where.col) == (step.span.line, step.span.col)
    ]
    if not here:
        return ""
    lo, hi = min(c[0] for c in here), max(c[1] for c in here)
    return f"K = {lo} · " if lo == hi else f"K {lo}..{hi} · "


def _steps(steps: tuple[n.Step, ...], times: int) -> Iterator[tuple[n.Step, int]]:
    """Each step but `break` with the most times an episode runs it (the bounds of the loops around it)."""
    for step in steps:
        if not isinstance(step, n.Break):
            yield step, times
        inner = times * (step.bound or 0) if isinstance(step, n.Repeat) else times
        for block in step.blocks:
            yield from _steps(block, inner)


def code_lenses(text: str, path: str) -> list[lsp.CodeLens]:
    """One lens a step (none while the workflow does not compile)."""
    tree = parsed(text, path)
    graph = analyze(text, path).program if tree else None
    if graph is None:
        return []
    lenses = []
    for step, times in _steps(tree.steps, 1):
        title = _k(step, graph) + f"at most: {cost_text(step_cost(step, graph.agents))}"
        title += f" · up to {times}× an episode" if times > 1 else ""
        start = span_range(step.span).start
        lenses.append(lsp.CodeLens(range=lsp.Range(start=start, end=start), command=lsp.Command(title, "")))
    return lenses


def mermaid(text: str, path: str) -> str | None:
    """The compiled event graph as a Mermaid flowchart; None when the workflow does not compile."""
    result = analyze(text, path)
    return export(result.graph, "mermaid") if result.graph is not None else None
