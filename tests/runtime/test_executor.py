"""The executor with the scripted backend: the worked event audit of docs/objective.md, invalid actions, traces."""

from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.runtime.effects import INVALID
from srpo_dsl.runtime.episode import Episode, Member, ObservationEntry
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.prompts import PromptRenderer
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
from srpo_dsl.runtime.traces import read_traces, to_trace, write_traces

ROOT = Path(__file__).resolve().parents[2]
THINK = "<think>need more</think>"


def _executor(wf, script: dict) -> Executor:
    backends = {name: ScriptedBackend(script) for name in wf.graph.policies}
    return Executor(wf.graph, backends, wf.renderer(), build_tools(wf))


def _shape(ep):
    return [(e.event_type, len(e.members)) for e in ep.events]


def test_search_case_1(tmp_path):
    """Two parallel queries (K=2, three documents come back, still K=2), then one query, then the answer."""
    wf = load_workflow(ROOT / "workflows/search_routed.srpo")
    task = {
        "id": "q1",
        "question": "Who wrote the novel?",
        "answer": "Jane Austen",
        "answers": ["Jane Austen"],
    }
    script = {
        "verifier": ["<think>no</think><verify>no</verify>"] * 2 + ["<think>ok</think><verify>yes</verify>"],
        "router": ["<route>1,2</route>", "<route>3</route>"],
        "searcher": [
            f"{THINK}<search>novel author</search>",
            f"{THINK}<search>Pride and Prejudice</search>",
            f"{THINK}<search>Jane Austen</search>",
        ],
        "answerer": ["<think>found</think><answer>Jane Austen</answer>"],
    }
    (ep,) = _executor(wf, script).run([task])
    assert _shape(ep) == [
        ("verify:verifier", 1),
        ("route:router", 1),
        ("parallel:searcher", 2),
        ("verify:verifier", 1),
        ("route:router", 1),
        ("parallel:searcher", 1),
        ("verify:verifier", 1),
        ("aggregate:answerer", 1),
    ]
    first = ep.events[2]
    assert [m.replica for m in first.members] == [1, 2]
    assert first.cardinality == 2 and first.complete
    docs = [d for o in first.observations for d in o["documents"]]
    assert (
        len(first.observations) == 2 and len(docs) == 2 * 3
    )  # top_k = 3 per query: observations, not members
    assert ep.tool_calls == 3
    assert ep.answer == "Jane Austen" and ep.reward == 1.0 and ep.team_return == 1.0
    assert ep.cost.calls == 9


def test_members_share_the_pre_action_state_and_do_not_see_each_other(tmp_path):
    wf = load_workflow(ROOT / "workflows/math_fixed.srpo")
    task = {"id": "m1", "question": "What is 2+2?", "answer": "4", "answers": ["4"]}
    seen: list[str] = []

    class Spy(ScriptedBackend):
        def generate(self, requests, *, seed=None):
            seen.extend(r.prompt for r in requests)
            return super().generate(requests, seed=seed)

    script = {
        "solver": ["\\boxed{4}", "\\boxed{5}", "\\boxed{4}"],
        "verifier": ["<verify>approve</verify>"],
        "aggregator": ["FINAL: \\boxed{4}"],
    }
    ex = Executor(wf.graph, {"lm": Spy(script)}, wf.renderer(), {})
    (ep,) = ex.run([task])
    assert _shape(ep) == [("parallel:solver", 3), ("verify:verifier", 1), ("aggregate:aggregator", 1)]
    solver_prompts = seen[:3]
    assert not any("\\boxed{5}" in p for p in solver_prompts)  # no member sees a sibling's output
    assert "\\boxed{5}" in seen[3]  # the verifier sees all three
    assert ep.events[0].state_id != ep.events[1].state_id
    assert ep.reward == 1.0


def test_math_case_2_revision_after_rejection():
    """Three parallel derivations (K=3) -> verification -> revision (K=1) -> verification -> aggregate."""
    wf = load_workflow(ROOT / "workflows/math_fixed.srpo")
    task = {"id": "m2", "question": "Last three digits of 7^2024?", "answer": "401", "answers": ["401"]}
    script = {
        "solver": ["\\boxed{401}", "\\boxed{201}", "\\boxed{401}", "revised: \\boxed{401}"],
        "verifier": ["<verify>reject</verify>", "<verify>approve</verify>"],
        "aggregator": ["FINAL: \\boxed{401}"],
    }
    (ep,) = _executor(wf, script).run([task])
    assert [(t, k) for t, k in _shape(ep)] == [
        ("parallel:solver", 3),
        ("verify:verifier", 1),
        ("revise:solver", 1),
        ("verify:verifier#2", 1),
        ("aggregate:aggregator", 1),
    ]
    assert ep.events[2].members[0].text == "revised: \\boxed{401}"
    assert ep.reward == 1.0


def test_invalid_route_is_recorded_and_selects_nobody():
    wf = load_workflow(ROOT / "workflows/math_routed.srpo")
    task = {"id": "m3", "question": "1+1?", "answer": "2", "answers": ["2"]}
    script = {
        "router": ["<route>1,9</route>", "<route>STOP</route>"],
        "solver": ["\\boxed{2}"],
        "verifier": ["<verify>reject</verify>"],
        "aggregator": ["FINAL: \\boxed{2}"],
    }
    (ep,) = _executor(wf, script).run([task])
    # round 1: invalid route (9 is out of range): no solver event, the verifier still reviews; round 2: STOP
    assert _shape(ep) == [
        ("route:router", 1),
        ("verify:verifier", 1),
        ("route:router", 1),
        ("aggregate:aggregator", 1),
    ]
    assert ep.events[0].members[0].valid is False
    assert ep.invalid_actions == 1
    assert ep.team_return == pytest.approx(1.0 - 0.1)


def test_loop_bound_ends_the_episode():
    wf = load_workflow(ROOT / "workflows/math_routed.srpo")
    task = {"id": "m4", "question": "1+1?", "answer": "2", "answers": ["2"]}
    script = {
        "router": ["<route>2</route>"],
        "solver": ["\\boxed{3}"],
        "verifier": ["<verify>reject</verify>"],
        "aggregator": ["no final answer"],
    }
    (ep,) = _executor(wf, script).run([task])
    assert [t for t, _ in _shape(ep)].count("route:router") == 4  # repeat at most 4
    assert ep.answer is None and ep.reward == 0.0 and ep.invalid_actions == 1


def test_missing_member_marks_event_incomplete(tmp_path):
    wf = load_workflow(ROOT / "workflows/quickstart.srpo")
    task = {"id": "a1", "question": "1+2", "answer": "3", "answers": ["3"]}

    class Lossy(ScriptedBackend):
        def generate(self, requests, *, seed=None):
            out = super().generate(requests, seed=seed)
            return [
                None if r.role == "solver" and i == 1 else x for i, (r, x) in enumerate(zip(requests, out))
            ]

    script = {
        "solver": ["\\boxed{3}"],
        "verifier": ["<verify>approve</verify>"],
        "aggregator": ["FINAL: \\boxed{3}"],
    }
    (ep,) = Executor(wf.graph, {"lm": Lossy(script)}, wf.renderer(), {}).run([task])
    first = ep.events[0]
    assert first.cardinality == 2 and len(first.members) == 1 and first.complete is False
    path = tmp_path / "t.jsonl"
    write_traces(path, [to_trace(ep, wf.graph.hash)])
    (back,) = read_traces(path)
    assert [e.event_id for e in back.incomplete_events] == [first.event_id]


def test_groups_and_trace_round_trip(tmp_path):
    wf = load_workflow(ROOT / "workflows/quickstart.srpo")
    tasks = task_data(wf, limit=3)
    script = {
        "solver": ["\\boxed{1}", "oops"],
        "verifier": ["<verify>approve</verify>"],
        "aggregator": ["FINAL: \\boxed{1}"],
    }
    episodes = _executor(wf, script).run(tasks, samples=2)
    assert [(e.prompt_id, e.sample) for e in episodes] == [(str(t["id"]), s) for t in tasks for s in (0, 1)]
    traces = [to_trace(ep, wf.graph.hash) for ep in episodes]
    path = tmp_path / "traces.jsonl"
    write_traces(path, traces)
    back = read_traces(path)
    assert back == traces
    assert len({e.event_id for t in back for e in t.events}) == sum(len(t.events) for t in back)
    assert all(
        len(m.behavior_logprobs) == len(m.response_token_ids)
        for t in back
        for e in t.events
        for m in e.members
    )
    assert back[0].events[0].members[1].valid is False  # "oops" breaks the boxed contract


def test_invalid_verdict_state_is_recorded():
    wf = load_workflow(ROOT / "workflows/math_fixed.srpo")
    task = {"id": "m5", "question": "1+1?", "answer": "2", "answers": ["2"]}
    script = {
        "solver": ["\\boxed{2}"],
        "verifier": ["<verify>maybe</verify>", "<verify>approve</verify>"],
        "aggregator": ["FINAL: \\boxed{2}"],
    }
    ex = _executor(wf, script)
    (ep,) = ex.run([task])
    # an invalid verdict is not `approve`: the revision loop runs, it does not default either way
    assert _shape(ep)[2] == ("revise:solver", 1)
    assert ep.invalid_actions == 1
    assert INVALID == "INVALID"


NESTED = """workflow nested
policy lm = hf("m")
task math(data = "d.jsonl")
agent solver[2] uses lm prompt "math/solver.j2" emits boxed
agent verifier uses lm prompt "math/verifier.j2" emits verdict(approve, reject)
agent aggregator uses lm prompt "math/aggregator.j2" emits final_boxed
repeat at most 2 {
  repeat at most 3 {
    parallel solver
    verify verifier
  } until verifier == approve
}
aggregate aggregator
reward math_equiv(aggregator, task.answer)
"""


@pytest.mark.parametrize(
    "verdicts,rounds",
    [
        (["reject"] * 6, 6),  # 3 inner rounds, twice
        (["approve", "approve"], 2),  # each inner loop stops after one round
        (["reject", "approve", "reject", "reject", "reject"], 5),  # 2 rounds, then 3 (inner counter reset)
    ],
)
def test_nested_loops_count_each_loop_on_its_own(tmp_path, verdicts, rounds):
    """The inner loop's last step leads back to its first both as its own next round and as the outer
    loop's next round: one edge, two ways with different loop effects."""
    (tmp_path / "nested.srpo").write_text(NESTED)
    (tmp_path / "math").symlink_to(ROOT / "workflows/math")
    wf = load_workflow(tmp_path / "nested.srpo")
    g = wf.graph.to_networkx()
    solver = next(v for v, d in g.nodes(data=True) if d.get("agent") == "solver")
    verify = next(v for v, d in g.nodes(data=True) if d.get("agent") == "verifier")
    back = g.edges[verify, solver]
    inner, outer = {"reset": [], "increment": ["L2"]}, {"reset": ["L2"], "increment": ["L1"]}
    assert back["effects"] == [inner, outer, outer]
    assert (
        back["when"] == "(verifier != approve and loop2 < 3) or "
        "(verifier == approve and loop1 < 2) or (loop2 >= 3 and loop1 < 2)"
    )
    script = {
        "solver": ["\\boxed{1}"] * 2 * rounds,
        "verifier": [f"<verify>{v}</verify>" for v in verdicts],
        "aggregator": ["FINAL: \\boxed{1}"],
    }
    task = {"id": "t", "question": "1?", "answer": "1", "answers": ["1"]}
    (ep,) = _executor(wf, script).run([task])
    assert _shape(ep) == [("parallel:solver", 2), ("verify:verifier", 1)] * rounds + [
        ("aggregate:aggregator", 1)
    ]


TWO_CALLS = """workflow two_calls
policy lm = hf("m")
task qa(data = "data/qa_sample.jsonl")
tool retriever = bm25(corpus = "data/wiki_sample.jsonl", top_k = 2)
agent searcher[2] uses lm prompt "search/searcher.j2" emits search
agent checker     uses lm prompt "search/searcher.j2" emits search
agent answerer    uses lm prompt "search/answerer.j2" emits answer
parallel searcher
call retriever on searcher
revise checker
call retriever on checker
aggregate answerer
reward exact_match(answerer, task.answers)
"""


def test_a_tool_called_from_two_nodes_records_each_call_on_its_own_event(tmp_path):
    """`call retriever on searcher`, later `call retriever on checker`: each node's queries are its own
    agent's, and their observations land on that agent's event (not on the first node's)."""
    (tmp_path / "two.srpo").write_text(TWO_CALLS)
    for sub in ("search", "data"):
        (tmp_path / sub).symlink_to(ROOT / ("workflows/search" if sub == "search" else "data"))
    wf = load_workflow(tmp_path / "two.srpo")
    script = {
        "searcher": [f"{THINK}<search>Pride and Prejudice</search>", f"{THINK}<search>novel author</search>"],
        "checker": [f"{THINK}<search>Jane Austen</search>"],
        "answerer": ["<think>found</think><answer>Jane Austen</answer>"],
    }
    task = {"id": "q", "question": "Who wrote it?", "answer": "Jane Austen", "answers": ["Jane Austen"]}
    (ep,) = _executor(wf, script).run([task])
    searched, checked, _ = ep.events
    assert [o["query"] for o in searched.observations] == ["Pride and Prejudice", "novel author"]
    assert [o["query"] for o in checked.observations] == ["Jane Austen"]
    assert all(len(o["documents"]) == 2 for o in searched.observations + checked.observations)
    assert ep.tool_calls == 3 and len(ep.documents) == 6


class SeedLog(ScriptedBackend):
    """The scripted backend noting each request's (role, seed)."""

    def __init__(self, script: dict, log: list):
        super().__init__(script)
        self.log = log

    def generate(self, requests, *, seed=None):
        self.log.extend((r.role, r.seed) for r in requests)
        return super().generate(requests, seed=seed)


def _draws(tasks: list[dict], samples: int, seed: int) -> list[tuple[str, int]]:
    """Every request's (role, seed) when three policies (one backend call each per round) run a loop of
    a solver pool (K = 3) and a verifier that always rejects, to the loop's bound of 3 rounds."""
    wf = load_workflow(ROOT / "workflows/math_nonsharing.srpo")
    script = {
        "solver": ["\\boxed{2}"],
        "verifier": ["<verify>reject</verify>"],
        "aggregator": ["FINAL: \\boxed{2}"],
    }
    log: list[tuple[str, int]] = []
    backends = {name: SeedLog(script, log) for name in wf.graph.policies}
    Executor(wf.graph, backends, wf.renderer(), {}).run(tasks, samples=samples, seed=seed)
    return log


def test_every_draw_of_a_run_has_a_seed_of_its_own():
    """One seed per (run seed, round, prompt, sample, member): none shared between the members of an
    event, the samples of a prompt, the rounds of a loop or the policies of a round; the same again for
    the same run seed; a prompt's draws the same beside other prompts as alone."""
    tasks = [{"id": f"m{i}", "question": "1+1?", "answer": "2", "answers": ["2"]} for i in range(3)]
    draws = _draws(tasks, samples=2, seed=5)
    assert len(draws) == 3 * 2 * (3 * 3 + 3 + 1)  # per episode: 3 rounds of 3 solvers and a verifier
    seeds = [s for _, s in draws]
    assert None not in seeds and len(set(seeds)) == len(seeds)
    assert _draws(tasks, samples=2, seed=5) == draws
    assert not set(seeds) & {s for _, s in _draws(tasks, samples=2, seed=6)}
    alone = _draws(tasks[1:2], samples=2, seed=5)
    assert set(alone) < set(draws)


def _output(role: str, replica: int, text: str, value: object) -> Member:
    return Member(0, role, replica, "lm", 0, [], [], [], text, value is not None, value)


def test_templates_read_the_history_as_the_documented_dicts():
    """The episode keeps typed history entries; a template's `history` is the dicts of docs/dsl.md, in
    order, so the shipped templates render what they rendered from dicts (the embedded model's prompts)."""
    ep = Episode("e/0", "p", 0, {"id": "t", "question": "2+3"})
    calc = {"action": "calc", "value": "2+3"}
    ep.commit_outputs([_output("solver", 1, "<calc>2+3</calc>", calc), _output("solver", 2, "?", None)])
    ep.observe(1, {"tool": "calc", "query": "2+3", "result": "5"})
    ep.observe(2, {"tool": "calc", "query": "?", "error": "boom"})
    ep.observe(1, {"tool": "search", "query": "q", "documents": [{"id": "d", "title": "Ti", "text": "Tx"}]})
    ep.observe(1, {"env": "sandbox", "agent": "solver", "result": "ok"})
    ctx = ep.context(role="solver", replica=1, pool_size=2, turn=1, max_turns=2)
    assert [type(h) for h in ctx["history"]] == [dict] * 6 and ctx["history"][:3] == [
        {
            "kind": "output",
            "role": "solver",
            "replica": 1,
            "text": "<calc>2+3</calc>",
            "valid": True,
            "value": calc,
        },
        {"kind": "output", "role": "solver", "replica": 2, "text": "?", "valid": False, "value": None},
        {"kind": "observation", "replica": 1, "tool": "calc", "query": "2+3", "result": "5"},
    ]
    assert ctx["history"][5] == {
        "kind": "observation",
        "replica": 1,
        "env": "sandbox",
        "agent": "solver",
        "result": "ok",
    }
    renderer = PromptRenderer([ROOT / "workflows"])
    assert renderer.render("supervisor/_history.j2", ctx) == (
        "\n[solver] <calc>2+3</calc>\n[solver] ?\n<output>5</output>\n<output>error: boom</output>\n"
        "<information>\nDoc 1 (Ti): Tx\n</information>\n<output>ok</output>"
    )
    second = ep.context(role="solver", replica=2, pool_size=2, turn=1, max_turns=2)
    assert renderer.render("react_pool/worker.j2", second) == "Q 2+3= ? boom"
    # Python reads the typed records (the embedded model's tool agent: `srpo_dsl.models.episodes`)
    seen = [h.observation for h in ep.history if isinstance(h, ObservationEntry)]
    assert [o["result"] for o in seen if "result" in o] == ["5", "ok"]
