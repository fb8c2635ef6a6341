"""Exports: node-link JSON round-trips; Mermaid, DOT and GraphML carry the graph."""

import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import pytest

from srpo_dsl.lang import load_graph
from srpo_dsl.lang.compile.graph_formats import from_json, to_dot, to_graphml, to_json, to_mermaid

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


@pytest.mark.parametrize("name", ["math_routed", "search_routed", "math_fixed", "quickstart"])
def test_json_round_trip(name):
    g = load_graph(WORKFLOWS / f"{name}.srpo").to_networkx()
    back = from_json(to_json(g))
    assert nx.utils.graphs_equal(g, back)
    assert back.graph == g.graph
    assert dict(back.nodes(data=True)) == dict(g.nodes(data=True))


def test_mermaid():
    text = to_mermaid(load_graph(WORKFLOWS / "math_routed.srpo").to_networkx())
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    assert '    n2[["parallel solver by router (1..3)"]]' in lines
    assert '    n1 -->|"router == STOP"| n4' in lines
    assert "    n4 --> END" in lines  # `end` is a Mermaid keyword
    assert not any(line.split()[0] == "end" for line in lines[1:])


def test_dot():
    text = to_dot(load_graph(WORKFLOWS / "search_routed.srpo").to_networkx())
    assert text.startswith('digraph "search_routed" {')
    assert '"n4" [label="call retriever on searcher (top 3)", shape=cylinder];' in text
    assert '"n1" -> "n5" [label="verifier == yes"];' in text
    assert text.rstrip().endswith("}")


def test_graphml_flattens_nested_attributes():
    g = load_graph(WORKFLOWS / "search_routed.srpo").to_networkx()
    text = to_graphml(g)
    ET.fromstring(text)  # well-formed XML
    import io

    back = nx.read_graphml(io.StringIO(text))
    import json

    card = json.loads(back.nodes["n3"]["cardinality"])
    assert card == {"min": 1, "max": 5}
    assert back.graph["name"] == "search_routed"
