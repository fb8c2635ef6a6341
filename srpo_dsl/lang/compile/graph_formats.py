"""Event graph -> text formats: node-link JSON (tools), Mermaid (people), DOT, GraphML."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from srpo_dsl.lang.syntax.steps import STEP_KINDS, Shape

if TYPE_CHECKING:
    import networkx as nx


def to_json(graph: nx.DiGraph[str]) -> str:
    import networkx as nx

    return json.dumps(nx.node_link_data(graph, edges="edges"), indent=2, sort_keys=True)


def from_json(text: str) -> nx.DiGraph[str]:
    import networkx as nx

    graph = nx.node_link_graph(json.loads(text), directed=True, multigraph=False, edges="edges")
    assert isinstance(graph, nx.DiGraph), "`directed=True, multigraph=False` makes a DiGraph"
    return graph


def _label(data: Mapping[str, object]) -> str:
    label = str(data.get("label", data["kind"]))
    if data.get("routed_by"):  # a routed step: how many of the pool may act
        cardinality = data["cardinality"]
        assert isinstance(cardinality, dict), "an event node's `cardinality` is {min, max}"
        label += f" ({cardinality['min']}..{cardinality['max']})"
    if data.get("top_k") is not None:  # a retriever's documents per query
        label += f" (top {data['top_k']})"
    return label


# The nodes that are not event steps; an event step is drawn as its kind's entry in the step table says.
_OTHER_SHAPES = {
    "start": Shape("((", "))", "circle"),
    "end": Shape("((", "))", "doublecircle"),
    "tool": Shape("[(", ")]", "cylinder"),
    "env": Shape("[\\", "/]", "invtrapezium"),
}


def _shape(kind: str) -> Shape:
    return _OTHER_SHAPES[kind] if kind in _OTHER_SHAPES else STEP_KINDS.lookup(kind).shape


def to_mermaid(graph: nx.DiGraph[str]) -> str:
    """A `flowchart` GitHub renders; parallel steps are double-bordered boxes."""

    def ident(v: str) -> str:  # `end` is reserved
        return v.upper() if v in ("start", "end") else v

    out = ["flowchart TD"]
    for v, d in graph.nodes(data=True):
        shape = _shape(d["kind"])
        label = _label(d).replace(chr(34), "#quot;")
        out.append(f'    {ident(v)}{shape.mermaid_open}"{label}"{shape.mermaid_close}')
    for u, v, d in graph.edges(data=True):
        when = d.get("when", "always")
        arrow = "-->" if when == "always" else f'-->|"{when}"|'
        out.append(f"    {ident(u)} {arrow} {ident(v)}")
    return "\n".join(out) + "\n"


def to_dot(graph: nx.DiGraph[str]) -> str:
    """Graphviz DOT text, written directly (no pydot/pygraphviz needed)."""

    def q(s: object) -> str:
        return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'

    out = [f"digraph {q(graph.graph.get('name', 'workflow'))} {{", "    rankdir=TB;"]
    for v, d in graph.nodes(data=True):
        out.append(f"    {q(v)} [label={q(_label(d))}, shape={_shape(d['kind']).dot}];")
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


def to_graphml(graph: nx.DiGraph[str]) -> str:
    """GraphML holds scalars only: nested attributes become JSON strings, None becomes ''."""
    import networkx as nx

    flat: nx.DiGraph[str] = nx.DiGraph()
    flat.graph.update({k: _flat(v) for k, v in graph.graph.items()})
    for v, d in graph.nodes(data=True):
        flat.add_node(v, **{k: _flat(x) for k, x in d.items()})
    for u, v, d in graph.edges(data=True):
        flat.add_edge(u, v, **{k: _flat(x) for k, x in d.items()})
    buf = io.BytesIO()
    nx.write_graphml(flat, buf)
    return buf.getvalue().decode()


_WRITERS = {"json": to_json, "mermaid": to_mermaid, "dot": to_dot, "graphml": to_graphml}
FORMATS = tuple(_WRITERS)


def export(graph: nx.DiGraph[str], fmt: str) -> str:
    """`graph` as text in one of `FORMATS`."""
    return _WRITERS[fmt](graph)
