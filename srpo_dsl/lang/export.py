"""Event graph -> text formats: node-link JSON (tools), Mermaid (people), DOT, GraphML."""

from __future__ import annotations

import io
import json

import networkx as nx

FORMATS = ("json", "mermaid", "dot", "graphml")


def to_json(graph: nx.DiGraph) -> str:
    return json.dumps(nx.node_link_data(graph, edges="edges"), indent=2, sort_keys=True)


def from_json(text: str) -> nx.DiGraph:
    return nx.node_link_graph(json.loads(text), directed=True, multigraph=False, edges="edges")


def _label(data: dict) -> str:
    label = data.get("label", data["kind"])
    card = data.get("cardinality")
    if card and data["kind"] == "parallel" and data.get("routed_by"):
        label += f" ({card['min']}..{card['max']})"
    if data["kind"] == "tool":
        label += f" (top {data['top_k']})"
    return label


_MERMAID_SHAPES = {
    "start": ("((", "))"),
    "end": ("((", "))"),
    "route": ("{{", "}}"),
    "verify": ("{", "}"),
    "parallel": ("[[", "]]"),
    "tool": ("[(", ")]"),
    "revise": ("[/", "/]"),
    "aggregate": ("([", "])"),
}


def to_mermaid(graph: nx.DiGraph) -> str:
    """A `flowchart` GitHub renders; parallel steps are double-bordered boxes."""
    ident = lambda v: v.upper() if v in ("start", "end") else v  # noqa: E731  (`end` is reserved)
    out = ["flowchart TD"]
    for v, d in graph.nodes(data=True):
        left, right = _MERMAID_SHAPES.get(d["kind"], ("[", "]"))
        out.append(f'    {ident(v)}{left}"{_label(d).replace(chr(34), "#quot;")}"{right}')
    for u, v, d in graph.edges(data=True):
        when = d.get("when", "always")
        arrow = "-->" if when == "always" else f'-->|"{when}"|'
        out.append(f"    {ident(u)} {arrow} {ident(v)}")
    return "\n".join(out) + "\n"


def to_dot(graph: nx.DiGraph) -> str:
    """Graphviz DOT text, written directly (no pydot/pygraphviz needed)."""
    q = lambda s: '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'  # noqa: E731
    shapes = {
        "start": "circle",
        "end": "doublecircle",
        "route": "diamond",
        "verify": "diamond",
        "parallel": "box3d",
        "tool": "cylinder",
        "revise": "box",
        "aggregate": "box",
    }
    out = [f"digraph {q(graph.graph.get('name', 'workflow'))} {{", "    rankdir=TB;"]
    for v, d in graph.nodes(data=True):
        out.append(f"    {q(v)} [label={q(_label(d))}, shape={shapes.get(d['kind'], 'box')}];")
    for u, v, d in graph.edges(data=True):
        when = d.get("when", "always")
        out.append(
            f"    {q(u)} -> {q(v)};" if when == "always" else f"    {q(u)} -> {q(v)} [label={q(when)}];"
        )
    out.append("}")
    return "\n".join(out) + "\n"


def _flat(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return value


def to_graphml(graph: nx.DiGraph) -> str:
    """GraphML holds scalars only: nested attributes become JSON strings, None becomes ''."""
    flat = nx.DiGraph()
    flat.graph.update({k: _flat(v) for k, v in graph.graph.items()})
    for v, d in graph.nodes(data=True):
        flat.add_node(v, **{k: _flat(x) for k, x in d.items()})
    for u, v, d in graph.edges(data=True):
        flat.add_edge(u, v, **{k: _flat(x) for k, x in d.items()})
    buf = io.BytesIO()
    nx.write_graphml(flat, buf)
    return buf.getvalue().decode()


def export(graph: nx.DiGraph, fmt: str) -> str:
    return {"json": to_json, "mermaid": to_mermaid, "dot": to_dot, "graphml": to_graphml}[fmt](graph)
