"""The event graph as inline SVG: nodes in layers (networkx's topological generations of the forward
edges), back edges (loops) drawn as arcs on the right, guards as edge labels.

SVG shapes of our own, not a matplotlib figure: every event node is a `<g>` carrying `data-event-type`
and a `<title>` (its type and trace count, shown on hover), which the page's script makes clickable to
filter the episodes and highlights (`active`) for the chosen type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

ROW, GAP, HEIGHT, CHAR = 74, 28, 34, 7.2  # layer pitch, horizontal gap, box height, px per label char


@dataclass(frozen=True)
class Box:
    x: float  # centre
    y: float  # top
    width: float


def layers(graph: nx.DiGraph) -> dict[str, int]:
    """Each node's layer: networkx's topological generation over the forward edges (compile order is a
    topological order of them; an edge back to an earlier node is a loop), i.e. the longest forward path
    to it from a node without forward predecessors."""
    import networkx as nx

    order = {v: i for i, v in enumerate(graph.nodes)}
    forward: nx.DiGraph[str] = nx.DiGraph()
    forward.add_nodes_from(graph.nodes)
    forward.add_edges_from((u, v) for u, v in graph.edges() if order[u] < order[v])
    return {v: i for i, generation in enumerate(nx.topological_generations(forward)) for v in generation}


def label(data: Mapping) -> str:
    return str(data.get("label", data.get("kind", "")))


def place(graph: nx.DiGraph) -> dict[str, Box]:
    """A box per node: layers top to bottom, the nodes of a layer side by side, centred."""
    layer = layers(graph)
    rows: dict[int, list[str]] = {}
    for v in graph.nodes:  # each layer's nodes in compile order
        rows.setdefault(layer[v], []).append(v)
    widths = {v: max(60.0, CHAR * len(label(graph.nodes[v])) + 20) for v in graph.nodes}
    span = max(sum(widths[v] for v in row) + GAP * (len(row) - 1) for row in rows.values())
    boxes = {}
    for i, row in rows.items():
        x = (span - (sum(widths[v] for v in row) + GAP * (len(row) - 1))) / 2
        for v in row:
            boxes[v] = Box(x + widths[v] / 2, i * ROW, widths[v])
            x += widths[v] + GAP
    return boxes


def edge_svg(u: Box, v: Box, side: float | None, guard: str) -> str:
    """An edge to the next layer straight down; a longer or backward one (`side`: the x to bend
    around, left or right of the boxes) as an arc between the boxes' sides; the guard as its label."""
    if side is None:
        x0, y0, x1, y1 = u.x, u.y + HEIGHT, v.x, v.y - 2
        path = f"M{x0:.0f},{y0:.0f} L{x1:.0f},{y1:.0f}"
        tx, ty, anchor = (x0 + x1) / 2 + 6, (y0 + y1) / 2 + 4, "start"
    else:
        sign = 1 if side > u.x else -1
        x0, y0 = u.x + sign * u.width / 2, u.y + HEIGHT / 2
        x1, y1 = v.x + sign * (v.width / 2 + 4), v.y + HEIGHT / 2
        path = f"M{x0:.0f},{y0:.0f} C{side:.0f},{y0:.0f} {side:.0f},{y1:.0f} {x1:.0f},{y1:.0f}"
        tx, ty, anchor = side + sign * 4, (y0 + y1) / 2 + 4, "start" if sign > 0 else "end"
    text = f'<text class="guard" x="{tx:.0f}" y="{ty:.0f}" text-anchor="{anchor}">{escape(guard)}</text>'
    return f'<path class="edge" d="{path}" marker-end="url(#arrow)"/>' + (text if guard != "always" else "")


def node_svg(v: str, data: Mapping, box: Box, count: int | None) -> str:
    """A rounded box with the node's label; event nodes name their event type and trace count."""
    kind = data.get("kind", "")
    event_type = data.get("event_type")
    attrs = f' data-event-type="{escape(event_type)}"' if event_type else ""
    title = f"{v}: {event_type or kind}" + (f", {count} events in these traces" if count is not None else "")
    x = box.x - box.width / 2
    return (
        f'<g class="node {escape(kind)}"{attrs}><title>{escape(title)}</title>'
        f'<rect x="{x:.0f}" y="{box.y:.0f}" width="{box.width:.0f}" height="{HEIGHT}" rx="8"/>'
        f'<text x="{box.x:.0f}" y="{box.y + HEIGHT / 2 + 4:.0f}" text-anchor="middle">'
        f"{escape(label(data))}</text></g>"
    )


def graph_svg(graph: nx.DiGraph, counts: Mapping[str, int]) -> str:
    """The whole graph; `counts`: event type -> events of that type in the traces."""
    boxes, layer = place(graph), layers(graph)
    order = {v: i for i, v in enumerate(graph.nodes)}
    left = min(b.x - b.width / 2 for b in boxes.values()) - 50
    right = max(b.x + b.width / 2 for b in boxes.values()) + 50

    def side(u: str, v: str) -> float | None:
        if order[v] <= order[u]:
            return right  # a loop back
        return None if layer[v] == layer[u] + 1 else left  # a step down, or one over other layers

    edges = [
        edge_svg(boxes[u], boxes[v], side(u, v), str(d.get("when", "always")))
        for u, v, d in graph.edges(data=True)
    ]
    nodes = [
        node_svg(v, d, boxes[v], counts.get(d["event_type"], 0) if "event_type" in d else None)
        for v, d in graph.nodes(data=True)
    ]
    margin = 10 + 6.5 * max((len(str(d.get("when", ""))) for *_, d in graph.edges(data=True)), default=0)
    x, width, height = (
        left - margin,
        right - left + 2 * margin,
        max(b.y for b in boxes.values()) + HEIGHT + 20,
    )
    arrow = (
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>'
    )
    return (
        f'<svg class="graph" viewBox="{x:.0f} -10 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" role="img" aria-label="event graph">'
        + arrow
        + "".join(edges)
        + "".join(nodes)
        + "</svg>"
    )
