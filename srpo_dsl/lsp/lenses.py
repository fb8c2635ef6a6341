"""textDocument/codeLens: above each step, its K range (an event step's: how many replicas act in it)
and the most one execution costs (the compiler's static bounds, as the hover gives them), and how many
times an episode can run it; from the last analysis that checked (`view`), while the text has an
error too. `srpo.showGraph`: the compiled event graph as Mermaid, as
`srpo-dsl compile --emit mermaid` prints it."""

from __future__ import annotations

from collections.abc import Iterator

from lsprotocol import types as lsp

from srpo_dsl.lang import analyze
from srpo_dsl.lang.compile.compiler import step_costs
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.lang.compile.graph_formats import export
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lsp.costs import cost_text
from srpo_dsl.lsp.view import View

SHOW_GRAPH = "srpo.showGraph"


def _k_by_step(graph: EventGraph) -> dict[tuple[int, int], str]:
    """`K = k · ` or `K lo..hi · ` by the (line, column) of each event step, over its nodes (a step
    inside a loop or after a branch has several): one pass over the graph's event nodes."""
    found: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for v in graph.event_nodes:
        found.setdefault((v.where.line, v.where.col), []).append(v.cardinality)
    out = {}
    for at, here in found.items():
        lo, hi = min(c[0] for c in here), max(c[1] for c in here)
        out[at] = f"K = {lo} · " if lo == hi else f"K {lo}..{hi} · "
    return out


def _steps(steps: tuple[n.Step, ...], times: int) -> Iterator[tuple[n.Step, int]]:
    """Each step but `break` with the most times an episode runs it (the bounds of the loops around it)."""
    for step in steps:
        if not isinstance(step, n.Break):
            yield step, times
        inner = times * (step.bound or 0) if isinstance(step, n.Repeat) else times
        for block in step.blocks:
            yield from _steps(block, inner)


def lenses_of(view: View | None) -> Iterator[lsp.CodeLens]:
    """One lens a step of the last analysis that checked, on the lines the edits since have left alone
    (none before the document first checked), made as they are taken (`chunked`). One pass over the
    steps and one over the graph."""
    graph = view.good.graph if view is not None else None
    if graph is None:
        return
    ks = _k_by_step(graph)
    cost = step_costs(graph.agents)
    for step, times in _steps(view.tree.steps, 1):
        line = view.lines.to_new(step.span.line - 1)
        if line is None or view.lines.to_new(step.span.end_line - 1) is None:
            continue  # the step touches a line edited since
        k = ks.get((step.span.line, step.span.col), "") if isinstance(step, n.EventStep) else ""
        title = k + f"at most: {cost_text(cost(step))}"
        title += f" · up to {times}× an episode" if times > 1 else ""
        start = lsp.Position(line=line, character=max(step.span.col - 1, 0))
        yield lsp.CodeLens(range=lsp.Range(start=start, end=start), command=lsp.Command(title, ""))


def code_lenses(view: View | None) -> list[lsp.CodeLens]:
    return list(lenses_of(view))


def mermaid(text: str, path: str) -> str | None:
    """The compiled event graph as a Mermaid flowchart; None when the workflow does not compile."""
    result = analyze(text, path)
    return export(result.graph, "mermaid") if result.graph is not None else None
