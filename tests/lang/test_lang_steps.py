"""Step kinds as data: the step table is the one source of what a kind is, and a kind defined here,
outside the package, works end to end through the documented path (docs/dsl.md, "Adding a step kind"):
parsed from a file, checked, compiled, exported and executed with the scripted backend."""

import re
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang import STEP_KINDS, Shape, StepKind, analyze, parse, register_step
from srpo_dsl.lang.compile.graph_formats import to_dot, to_mermaid
from srpo_dsl.lang.syntax.grammar import grammar_text, lark_parser, statements
from srpo_dsl.lang.syntax.messages import render_pretty
from srpo_dsl.lang.syntax.steps import FORMS
from srpo_dsl.runtime.effects import EFFECTS, INVALID
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import load_workflow

DSL = Path(__file__).resolve().parents[2] / "docs" / "dsl.md"

# ---- the toy kind: a pool of voters; the majority's word is the decision ------------------------------
POLL = StepKind(
    keyword="poll",
    cardinality=frozenset({"pool"}),
    contracts=frozenset({"verdict"}),
    effects=("majority", "feedback"),
    shape=Shape("[\\", "\\]", "trapezium"),
)


def majority(ep, node, members):
    """The word most valid members gave (a tie: the one given first); INVALID when none was valid."""
    words = Counter(m.parsed for m in members if m.valid)
    ep.state[node.agent.name] = words.most_common(1)[0][0] if words else INVALID


@pytest.fixture
def poll():
    register_step(POLL)
    EFFECTS.add("majority", majority)
    yield POLL
    del STEP_KINDS["poll"], EFFECTS["majority"]  # other tests see the language as shipped


WORKFLOW = """workflow polled
policy lm = hf("m")
task math(data = "d.jsonl")
agent solver uses lm prompt "p.j2" emits boxed
agent voter[3] uses lm prompt "p.j2" emits verdict(approve, reject)
agent agg uses lm prompt "agg.j2" emits final_boxed
repeat at most 3 {
  parallel solver
  poll voter
} until voter == approve
aggregate agg
reward math_equiv(agg, task.answer) invalid -0.1
"""


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "p.j2").write_text("{{ task.question }}\n")
    (tmp_path / "agg.j2").write_text("{{ task.question }} {{ feedback | join(' | ') }}\n")
    (tmp_path / "polled.srpo").write_text(WORKFLOW)
    return tmp_path


def test_a_kind_registered_outside_the_package_is_parsed_checked_compiled_and_exported(poll, folder):
    result = analyze(WORKFLOW, str(folder / "polled.srpo"), [folder])
    assert result.diagnostics == []
    voters = next(v for v in result.program.event_nodes if v.kind == "poll")
    assert (voters.event_type, voters.replicas, voters.cardinality) == ("poll:voter", (1, 2, 3), (3, 3))
    assert voters.step is POLL
    g = result.graph
    assert g.nodes[voters.id]["kind"] == "poll" and g.graph["max_calls"] == 3 * (1 + 3) + 1
    assert f'    {voters.id}[\\"poll voter K=3"\\]' in to_mermaid(g).splitlines()
    assert f'"{voters.id}" [label="poll voter K=3", shape=trapezium];' in to_dot(g)


def test_the_contract_a_registered_kind_requires_is_enforced_at_the_step(poll, folder):
    text = WORKFLOW.replace("  poll voter\n", "  poll voter\n  poll solver\n")
    (diag,) = analyze(text, "polled.srpo", [folder]).diagnostics
    assert (diag.code, diag.span.line, diag.span.col) == ("E045", 10, 8)
    assert diag.message == "`poll` needs an agent that emits `verdict(...)`; `solver` emits `boxed`"
    assert render_pretty(diag, text).splitlines()[2].strip() == "^^^^^^"


def test_a_form_the_registered_kind_does_not_take_is_an_error(poll, folder):
    text = WORKFLOW.replace("agent agg", 'agent r uses lm prompt "p.j2" emits route(voter)\nagent agg')
    text = text.replace("  poll voter\n", "  route r\n  poll voter by r\n")
    found = [(d.code, d.message) for d in analyze(text, "polled.srpo", [folder]).diagnostics]
    assert found == [("E047", "`poll` takes a fixed set of replicas (`poll P` or `poll P[i, j]`)")]


def test_a_registered_kind_runs_with_its_own_effect(poll, folder):
    wf = load_workflow(folder / "polled.srpo")
    # round 1: approve, reject, reject -> the majority rejects (the first member alone would approve);
    # round 2: reject, approve, approve -> the majority approves and the loop ends
    votes = ["approve", "reject", "reject", "reject", "approve", "approve"]
    script = {
        "solver": ["\\boxed{4}"],
        "voter": [f"<verify>{v}</verify>" for v in votes],
        "agg": ["FINAL: \\boxed{4}"],
    }
    prompts: dict[str, list[str]] = {}

    class Spy(ScriptedBackend):
        def generate(self, requests, *, seed=None):
            for r in requests:
                prompts.setdefault(r.role, []).append(r.prompt)
            return super().generate(requests, seed=seed)

    task = {"id": "t", "question": "2+2?", "answer": "4"}
    (ep,) = Executor(wf.graph, {"lm": Spy(script)}, wf.renderer(), {}).run([task])
    assert [(e.event_type, len(e.members)) for e in ep.events] == [
        ("parallel:solver", 1),
        ("poll:voter", 3),
        ("parallel:solver", 1),
        ("poll:voter", 3),
        ("aggregate:agg", 1),
    ]
    assert ep.state["voter"] == "approve"
    assert ep.feedback == [f"<verify>{v}</verify>" for v in votes]  # the kind's second effect
    assert prompts["agg"] == [f"2+2? {' | '.join(ep.feedback)}"]  # later prompts see it
    assert ep.reward == 1.0


def test_an_effect_without_a_handler_is_refused_before_anything_runs(folder):
    register_step(POLL)
    try:
        wf = load_workflow(folder / "polled.srpo")
        with pytest.raises(ValueError, match="no handler for the step effect\\(s\\) majority"):
            Executor(wf.graph, {"lm": ScriptedBackend({"*": ["x"]})}, wf.renderer(), {})
    finally:
        del STEP_KINDS["poll"]


def test_registering_a_kind_changes_the_parser_and_unregistering_restores_it(poll):
    assert "poll" in grammar_text() and "POLL" in statements(lark_parser()).steps
    assert parse("workflow w\npoll voter\n").steps[0].kind == "poll"
    del STEP_KINDS["poll"]
    try:
        (diag,) = analyze("workflow w\npoll voter\n").diagnostics
        assert diag.code == "E001" and diag.message.startswith("unexpected `poll`")
        assert "poll" not in grammar_text()
    finally:
        register_step(POLL)


FORMS_WORKFLOW = """workflow forms
policy lm = hf("m")
task math(data = "d.jsonl")
agent solver[3] uses lm prompt "p.j2" emits boxed
agent voter[2] uses lm prompt "p.j2" emits verdict(approve, reject)
agent router uses lm prompt "p.j2" emits route(solver)
agent agg uses lm prompt "p.j2" emits final_boxed
{step}
aggregate agg
reward math_equiv(agg, task.answer)
"""


@pytest.mark.parametrize(
    "step,replicas,cardinality",
    [
        ("verify voter", (1,), (1, 1)),
        ("verify voter[2]", (2,), (1, 1)),  # a step of one replica may name it
        ("revise solver[3]", (3,), (1, 1)),
        ("parallel solver", (1, 2, 3), (3, 3)),
        ("parallel solver[1, 3]", (1, 3), (2, 2)),
    ],
)
def test_a_step_s_members_follow_its_form(folder, step, replicas, cardinality):
    text = FORMS_WORKFLOW.format(step=step)
    node = analyze(text, "w.srpo", [folder]).program.nodes["n1"]
    assert (node.kind, node.replicas, node.cardinality, node.routed_by) == (
        step.split()[0],
        replicas,
        cardinality,
        None,
    )


@pytest.mark.parametrize(
    "step,message",
    [
        ("revise solver[1, 2]", "`revise` takes one replica (`revise A` or `revise A[i]`)"),
        ("aggregate agg by router", "`aggregate` takes one replica (`aggregate A` or `aggregate A[i]`)"),
    ],
)
def test_a_form_a_built_in_kind_does_not_take_is_an_error_at_the_step(folder, step, message):
    text = FORMS_WORKFLOW.format(step=step)
    found = [
        (d.code, d.span.line, d.span.col, d.message) for d in analyze(text, "w.srpo", [folder]).diagnostics
    ]
    assert ("E047", 8, 1, message) in found


# ---- the table is the one source ---------------------------------------------------------------------
_WRITTEN = {"singleton": "{kw} a[1]", "pool": "{kw} a[1, 2]", "routed": "{kw} a by r"}


@pytest.mark.parametrize("keyword", list(STEP_KINDS))
def test_every_kind_in_the_table_is_a_step_of_the_grammar(keyword):
    kind = STEP_KINDS[keyword]
    assert keyword.upper() in statements(lark_parser()).steps
    for form in kind.cardinality:
        (step,) = parse(f"workflow w\n{_WRITTEN[form].format(kw=keyword)}\n").steps
        assert step.kind == keyword


@pytest.mark.parametrize("keyword", list(STEP_KINDS))
def test_exports_draw_each_kind_as_the_table_says(keyword):
    shape = STEP_KINDS[keyword].shape
    g = nx.DiGraph(name="w")
    g.add_node("n1", kind=keyword, label="x")
    assert f'    n1{shape.mermaid_open}"x"{shape.mermaid_close}' in to_mermaid(g).splitlines()
    assert f'"n1" [label="x", shape={shape.dot}];' in to_dot(g)


def test_the_docs_show_the_step_table_as_it_is():
    """docs/dsl.md: every kind in the Steps table, and the table of built-in kinds row for row."""
    text = DSL.read_text()
    steps, adding = text.split("## Steps", 1)[1], text.split("## Adding a step kind", 1)[1].split("\n## ")[0]
    cells = r" \| ([^|]+)"
    rows = {kw: rest for kw, *rest in re.findall(rf"^\| `(\w+)`{cells * 4} \|$", adding, re.M)}
    assert set(rows) == set(STEP_KINDS)
    for keyword, kind in STEP_KINDS.items():
        assert f"| `{keyword} " in steps, keyword
        contracts = ", ".join(f"`{c}`" for c in sorted(kind.contracts)) if kind.contracts else "any"
        assert rows[keyword] == [
            ", ".join(f for f in FORMS if f in kind.cardinality),
            contracts,
            ", ".join(f"`{e}`" for e in kind.effects) or "—",
            f"`{kind.shape.mermaid_open} {kind.shape.mermaid_close}`, {kind.shape.dot}",
        ]


def test_a_keyword_the_language_already_reserves_cannot_be_a_step():
    register_step(StepKind("agent", frozenset({"singleton"}), None, (), Shape("[", "]", "box")))
    try:
        with pytest.raises(ValueError, match="step keyword\\(s\\) agent: already a keyword of the language"):
            grammar_text()
    finally:
        del STEP_KINDS["agent"]


@pytest.mark.parametrize(
    "keyword,cardinality,problem",
    [
        ("Poll", {"pool"}, "lower-case"),
        ("poll", {"singleton", "pool"}, "cardinality"),
        ("poll", set(), "cardinality"),
        ("poll", {"all"}, "cardinality"),
    ],
)
def test_a_malformed_kind_is_refused_when_it_is_made(keyword, cardinality, problem):
    with pytest.raises(ValueError, match=problem):
        StepKind(keyword, frozenset(cardinality), None, (), Shape("[", "]", "box"))


def test_a_kind_is_registered_once():
    with pytest.raises(ValueError, match="registered twice"):
        register_step(STEP_KINDS["verify"])
