"""The shipped workflows compile to the expected graphs, cardinalities and cost bounds."""

from pathlib import Path

import networkx as nx
import pytest

from srpo_dsl.lang import analyze, load_graph
from srpo_dsl.lang.compile.compiler import program_hash
from srpo_dsl.lang.syntax.grammar import lark_parser
from srpo_dsl.lang.syntax.parser import parse

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
ALL = sorted(WORKFLOWS.glob("*.srpo"))


def test_grammar_has_no_conflicts():
    # raises on any shift/reduce conflict, and a reduce/reduce one no rule priority settles (`boolean.2`)
    lark_parser(strict=True)


def test_all_paper_workflows_ship():
    names = {p.stem for p in ALL}
    assert names >= {
        "math_fixed",
        "math_routed",
        "search_routed",
        "single_agent",
        "search_singleton",
        "search_k5_sum",
        "search_k5_mean",
        "search_k5_sqrt",
        "math_nonsharing",
        "quickstart",
    }


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_workflow_is_clean(path):
    result = analyze(path.read_text(), str(path))
    assert result.diagnostics == []
    assert result.graph is not None


def _events(g):
    return {d["event_type"]: d for _, d in g.nodes(data=True) if "event_type" in d}


def test_math_routed_by_hand():
    g = load_graph(WORKFLOWS / "math_routed.srpo").to_networkx()
    # per round: router (1 call) + up to 3 solvers + verifier = 3 events, 5 calls; 4 rounds; + aggregator
    assert (g.graph["max_events"], g.graph["max_calls"], g.graph["max_tool_calls"]) == (13, 21, 0)
    assert g.graph["max_tokens"] == 4 * (256 + 3 * 2048 + 1024) + 2048
    ev = _events(g)
    assert set(ev) == {"route:router", "parallel:solver", "verify:verifier", "aggregate:aggregator"}
    assert ev["parallel:solver"]["cardinality"] == {"min": 1, "max": 3}
    assert ev["parallel:solver"]["routed_by"] == "router"
    assert ev["verify:verifier"]["cardinality"] == {"min": 1, "max": 1}
    kinds = sorted(d["kind"] for _, d in g.nodes(data=True))
    assert kinds == ["aggregate", "end", "parallel", "route", "start", "verify"]
    node = {d["kind"]: v for v, d in g.nodes(data=True)}
    assert g.edges[node["route"], node["aggregate"]]["when"] == "router == STOP"
    assert g.edges[node["route"], node["parallel"]]["when"] == "router != STOP"
    assert g.edges[node["verify"], node["route"]]["when"] == "verifier != approve and loop < 4"
    assert g.edges[node["verify"], node["route"]]["effects"] == [{"reset": [], "increment": ["L1"]}]
    assert g.edges[node["verify"], node["aggregate"]]["when"] == "verifier == approve or loop >= 4"
    assert g.edges["start", node["route"]]["effects"] == [{"reset": ["L1"], "increment": []}]


def test_search_routed_by_hand():
    g = load_graph(WORKFLOWS / "search_routed.srpo").to_networkx()
    # per turn: verifier + router + up to 5 searchers = 3 events, 7 calls, 5 queries; 4 turns; + answer
    assert (g.graph["max_events"], g.graph["max_calls"], g.graph["max_tool_calls"]) == (13, 29, 20)
    ev = _events(g)
    assert ev["parallel:searcher"]["cardinality"] == {"min": 1, "max": 5}
    assert ev["parallel:searcher"]["roles"] == ["searcher"] * 5
    tool = next(d for _, d in g.nodes(data=True) if d["kind"] == "tool")
    assert "event_type" not in tool  # documents are observations, never actions
    assert (tool["tool"], tool["on"], tool["top_k"]) == ("retriever", "searcher", 3)


@pytest.mark.parametrize(
    "name,norm,k",
    [
        ("search_k5_sum", "none", 5),
        ("search_k5_mean", "mean", 5),
        ("search_k5_sqrt", "sqrt", 5),
        ("search_singleton", "sqrt", 1),
    ],
)
def test_ablation_set(name, norm, k):
    g = load_graph(WORKFLOWS / f"{name}.srpo").to_networkx()
    assert g.graph["train"]["set_norm"] == norm
    assert _events(g)["parallel:searcher"]["cardinality"] == {"min": k, "max": k}


def test_math_fixed_revision_loop():
    g = load_graph(WORKFLOWS / "math_fixed.srpo").to_networkx()
    ev = _events(g)
    assert ev["parallel:solver"]["cardinality"] == {"min": 3, "max": 3}
    assert ev["revise:solver"]["cardinality"] == {"min": 1, "max": 1}
    assert "verify:verifier#2" in ev  # the second verify step is its own event type
    assert (g.graph["max_events"], g.graph["max_calls"]) == (7, 9)


def test_nonsharing_has_a_policy_per_role():
    g = load_graph(WORKFLOWS / "math_nonsharing.srpo").to_networkx()
    ev = _events(g)
    assert ev["parallel:solver"]["policy"] == ["solver_lm"] * 3
    assert ev["verify:verifier"]["policy"] == ["verifier_lm"]
    assert all(p["trainable"] for p in g.graph["policies"].values()) and len(g.graph["policies"]) == 3


def test_quickstart_and_single_agent():
    q = load_graph(WORKFLOWS / "quickstart.srpo").to_networkx()
    assert [d["cardinality"]["max"] for _, d in q.nodes(data=True) if "event_type" in d] == [2, 1, 1]
    assert q.graph["policies"]["lm"]["model"] == "builtin:tiny"
    s = load_graph(WORKFLOWS / "single_agent.srpo").to_networkx()
    assert (s.graph["max_events"], s.graph["max_calls"]) == (1, 1)


def _assert_one_way_out(g):
    """At every node, for every assignment of the atoms, the conjunctions that hold lead one way:
    one target, one set of loop effects."""
    import itertools

    for v in g.nodes:
        outs = list(g.out_edges(v, data=True))
        if not outs:
            assert v == "end"
            continue
        atoms = {(a.get("var") or a["loop"], a["value"]) for _, _, d in outs for c in d["guard"] for a in c}
        keys = sorted(atoms, key=str)
        for values in itertools.product([True, False], repeat=len(keys)):
            truth = dict(zip(keys, values))

            def holds(a, truth=truth):
                t = truth[(a.get("var") or a["loop"], a["value"])]
                return t if a["op"] in ("==", "<") else not t

            ways = {
                (target, str(e))
                for _, target, d in outs
                for c, e in zip(d["guard"], d["effects"])
                if all(holds(a) for a in c)
            }
            consistent = all(
                sum(truth[k] for k in keys if k[0] == var and k in truth) <= 1
                for var in {k[0] for k in keys if not str(k[0]).startswith("L")}
            )
            if consistent:
                assert len(ways) == 1, (g.graph["name"], v, truth, ways)


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_every_node_has_exactly_one_way_out(path):
    _assert_one_way_out(load_graph(path).to_networkx())


NESTED_BODIES = [
    "repeat at most 2 { repeat at most 3 { verify verifier } }",
    "repeat at most 2 { repeat at most 3 { verify verifier } until verifier == approve }",
    "repeat at most 2 { break if verifier == approve repeat at most 2 { verify verifier } }",
    "repeat at most 3 { repeat at most 2 { verify verifier } if verifier == reject { verify verifier } }",
]


@pytest.mark.parametrize("body", NESTED_BODIES)
def test_nested_loops_compile_with_one_way_out(body):
    text = WORKFLOWS.joinpath("math_fixed.srpo").read_text()
    start, end = text.index("parallel solver"), text.index("aggregate aggregator")
    text = text[:start] + "verify verifier\n" + body + "\n" + text[end:]
    result = analyze(text, str(WORKFLOWS / "nested.srpo"))
    assert result.graph is not None, result.diagnostics
    _assert_one_way_out(result.graph)


def test_hash_ignores_comments_and_whitespace_but_not_content():
    text = (WORKFLOWS / "math_routed.srpo").read_text()
    noisy = "# a new comment\n\n" + text.replace("    route router", "route   router   # spaced")
    assert program_hash(parse(text, "a.srpo")) == program_hash(parse(noisy, "b.srpo"))
    changed = text.replace("repeat at most 4", "repeat at most 5")
    assert program_hash(parse(text, "a.srpo")) != program_hash(parse(changed, "a.srpo"))


def test_graph_is_a_networkx_digraph_with_contract_attributes():
    g = load_graph(WORKFLOWS / "search_routed.srpo").to_networkx()
    assert isinstance(g, nx.DiGraph)
    for key in ("name", "source", "hash", "max_events", "max_calls", "max_tool_calls", "max_tokens"):
        assert key in g.graph
    for _, d in g.nodes(data=True):
        if "event_type" in d:
            assert {"roles", "policy", "cardinality", "routed_by"} <= set(d)
    assert all("when" in d for _, _, d in g.edges(data=True))
