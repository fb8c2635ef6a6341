"""The agent options of docs/dsl.md "Generating and training an agent's outputs": `retries`, `trained`,
`budget`, `calls` and `stop`, and the templates' `shuffle` filter; run with scripted replies."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang.analysis import analyze
from srpo_dsl.rl import setwise_loss
from srpo_dsl.rl.loop.event_updates import event_updates
from srpo_dsl.rl.loop.role_metrics import MetricKeys, keyed_metrics, step_sums
from srpo_dsl.rl.objective.rows import build_rows
from srpo_dsl.runtime.episode import ObservationEntry
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.parsers import Parsed, parse_act_calls
from srpo_dsl.runtime.prompts import PromptRenderer
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
from srpo_dsl.runtime.traces import read_traces, to_trace, write_traces
from tests.support.clitools import cli

ROOT = Path(__file__).resolve().parents[2]
HEAD = """workflow t
policy lm = builtin("tiny")
task qa(data = "qa.jsonl")
"""
TOOL = 'tool calc = "tools.py:calc"(timeout = 5)\n'


class Logged(ScriptedBackend):
    """Scripted replies; every generate call's requests are kept, call by call."""

    def __init__(self, script: dict[str, list[str]]):
        super().__init__(script)
        self.calls: list[list] = []

    def generate(self, requests, **kw):
        self.calls.append(list(requests))
        return super().generate(requests, **kw)


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "p.j2").write_text(
        "{{ task.question }}{% for h in history if h.replica == replica %}|{{ h.text if h.kind == 'output' else h.result }}{% endfor %}"
    )
    (tmp_path / "tools.py").write_text(  # each call's queries, a line each, in calls.log
        "import json, pathlib\n"
        "def calc(queries):\n"
        "    with open(pathlib.Path(__file__).parent / 'calls.log', 'a') as f:\n"
        "        f.write(json.dumps(list(queries)) + '\\n')\n"
        "    return [q.upper() for q in queries]\n"
    )
    (tmp_path / "qa.jsonl").write_text(
        '{"id": "q1", "question": "Q1", "answers": ["1"]}\n{"id": "q2", "question": "Q2", "answers": ["1"]}\n'
    )
    return tmp_path


def run(folder: Path, body: str, replies: dict[str, list[str]], rows: int = 1, samples: int = 1):
    (folder / "t.srpo").write_text(HEAD + body)
    wf = load_workflow(folder / "t.srpo")
    backend = Logged(replies)
    executor = Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf))
    return executor.run(task_data(wf)[:rows], samples=samples), backend, wf


def diagnostics(folder: Path, body: str) -> list[tuple[str, int, int, str]]:
    result = analyze(HEAD + body, str(folder / "t.srpo"), [folder])
    return [(d.code, d.span.line, d.span.col, d.message) for d in result.diagnostics]


# ---- retries -------------------------------------------------------------------------------------------

RETRY = """agent solver uses lm prompt "p.j2" emits boxed with (retries = 2)
aggregate solver
reward exact_match(solver, task.answers) invalid -0.1
"""


def test_invalid_outputs_are_resampled_together_and_kept_as_tries(folder):
    # round 1: four episodes; episodes 1 and 3 break the contract, then 1 again: 3 calls in all
    replies = ["junk", "\\boxed{2}", "junk", "\\boxed{1}", "junk", "\\boxed{1}", "\\boxed{1}"]
    episodes, backend, _ = run(folder, RETRY, {"solver": replies}, rows=2, samples=2)
    assert [len(c) for c in backend.calls] == [4, 2, 1]  # every retry of a pass in one batch
    assert [c.seed for c in backend.calls[1]] != [c.seed for c in backend.calls[0][::2]]
    first, second, third, fourth = episodes
    assert [m.text for m in first.events[0].members] == ["\\boxed{1}"]
    assert [t.text for t in first.events[0].tries] == ["junk", "junk"]
    assert first.invalid_actions == 2 and first.team_return == pytest.approx(0.8) and first.reward == 1.0
    assert third.events[0].tries[0].text == "junk" and third.events[0].members[0].valid
    assert second.events[0].tries == [] and fourth.events[0].tries == []
    assert first.events[0].cardinality == 1 and first.events[0].complete
    assert first.cost.tokens == 4 + 4 + 9 and first.cost.calls == 1


def test_an_output_still_invalid_after_its_retries_is_the_member(folder):
    (ep,), backend, _ = run(folder, RETRY, {"solver": ["junk"]})
    assert len(backend.calls) == 3 and ep.invalid_actions == 3
    assert not ep.events[0].members[0].valid and len(ep.events[0].tries) == 2 and ep.answer is None


def test_tries_are_traced_and_an_older_trace_reads(folder, tmp_path):
    (ep,), _, wf = run(folder, RETRY, {"solver": ["junk", "\\boxed{1}"]})
    write_traces(tmp_path / "t.jsonl", [to_trace(ep, wf.graph.hash)])
    (back,) = read_traces(tmp_path / "t.jsonl")
    assert back.schema_ == "srpo-trace/4" and [t.text for t in back.events[0].tries] == ["junk"]
    assert back.events[0].tries[0].member_index == 0 and not back.events[0].tries[0].valid
    (old,) = read_traces(ROOT / "tests/data/old_run/traces.jsonl")[:1]
    assert all(e.tries == [] for e in old.events)
    audited = cli("audit", tmp_path / "t.jsonl")
    assert (
        audited.returncode == 0
        and "solver#1: \\boxed{1} (after 1 invalid tries, resampled)" in audited.stdout
    )


def test_a_try_is_trained_as_a_singleton_invalid_event_with_its_episodes_return(folder):
    # objective.md's table: episode 1 (a try, then right: R = 0.9), episode 2 (wrong: R = 0)
    episodes, _, _ = run(folder, RETRY, {"solver": ["junk", "\\boxed{2}", "\\boxed{1}"]}, samples=2)
    rows = build_rows(episodes, "srpo")
    assert list(rows.members) == [("q1/0/e1", 0), ("q1/0/e1/try1", 0), ("q1/1/e1", 0)]
    assert rows.returns.tolist() == pytest.approx([0.9, 0.9, 0.0])
    a = 0.3 / math.sqrt(0.18)
    assert rows.advantages.tolist() == pytest.approx([a, a, -2 * a], abs=1e-4)
    assert rows.num_events == 3


# ---- trained = false -------------------------------------------------------------------------------------

MIXED = """agent writer uses lm prompt "p.j2" emits boxed
agent lookup uses lm prompt "p.j2" emits boxed with (trained = false)
parallel writer, lookup
act lookup
aggregate writer
reward exact_match(writer, task.answers)
"""


def test_untrained_rows_are_left_out_and_a_mixed_set_keeps_its_trained_members(folder):
    episodes, _, wf = run(folder, MIXED, {"*": ["\\boxed{1}"]})
    rows = build_rows(episodes, "srpo", [a.name for a in wf.graph.agents.values() if not a.trained])
    assert rows.roles == ["writer", "writer"] and rows.members == [("q1/0/e1", 0), ("q1/0/e3", 0)]
    assert rows.num_events == 2 and rows.dropped_events == 0  # `act lookup` alone has no row
    everything = build_rows(episodes, "srpo")
    assert everything.roles == ["writer", "lookup", "lookup", "writer"]


def test_a_trained_events_update_leaves_its_untrained_members_out(folder):
    episodes, _, wf = run(folder, MIXED, {"*": ["\\boxed{1}"]}, samples=2)
    rows = build_rows(episodes, "srpo", ["lookup"])
    updates = event_updates(rows.members, rows.advantages, torch.zeros(len(rows), 2, dtype=torch.float64))
    trace = to_trace(episodes[0], wf.graph.hash, updates)
    mixed, alone, writer = trace.events
    assert mixed.update is not None and mixed.update.advantages == [0.0, None]
    assert alone.update is None and writer.update is not None and writer.update.advantages == [0.0]


def test_the_set_ratio_is_over_the_trained_members_only():
    # objective.md's table: l_writer = 0.2, l_lookup = -0.4; sqrt; A = 1, no clip at eps = 10
    def loss(logratios: list[float]) -> float:
        new = torch.tensor([[x] for x in logratios])
        out, _ = setwise_loss(
            new,
            torch.zeros_like(new),
            torch.ones_like(new),
            torch.zeros(len(logratios), dtype=torch.long),
            torch.ones(len(logratios)),
            clip_eps=10.0,
        )
        return float(out)

    assert loss([0.2]) == pytest.approx(-math.exp(0.2))  # lookup untrained: K = 1
    assert loss([0.2, -0.4]) == pytest.approx(-math.exp(-0.2 / math.sqrt(2)))  # trained: K = 2
    assert loss([0.2, 0.0]) == pytest.approx(-math.exp(0.2 / math.sqrt(2)))  # frozen: in K, ratio 1


def test_an_untrained_role_has_rollout_metrics_and_no_training_ones(folder):
    episodes, _, wf = run(folder, MIXED, {"*": ["\\boxed{1}"]})
    rows = build_rows(episodes, "srpo", ["lookup"])
    keys = MetricKeys.of(wf.graph)
    metrics = keyed_metrics(keys, step_sums(keys, episodes, rows), {})
    assert metrics["role/lookup/events"] == 2 and metrics["role/lookup/invalid_rate"] == 0.0
    assert "role/lookup/abs_advantage" not in metrics and "role/writer/abs_advantage" in metrics


def test_untrained_agents_after_the_reward_are_no_e070_and_all_untrained_is_w002(folder):
    late = MIXED.replace("act lookup\naggregate writer\n", "aggregate writer\nact lookup\n")
    assert diagnostics(folder, late) == []
    assert [d[0] for d in diagnostics(folder, late.replace(" with (trained = false)", ""))] == ["E070"]
    everyone = late.replace("emits boxed\nagent lookup", "emits boxed with (trained = false)\nagent lookup")
    assert [d[:3] for d in diagnostics(folder, everyone)] == [("W002", 1, 10)]


# ---- budget ----------------------------------------------------------------------------------------------

LOOP = (
    TOOL
    + """agent researcher uses lm prompt "p.j2" emits act(calc, answer) with (max_tokens = 16, budget = 24)
repeat at most 3 {
    act researcher
    break if researcher == answer
    call calc on researcher
}
reward exact_match(researcher, task.answers)
"""
)


def test_a_budget_caps_each_turn_and_ends_the_agents_turns(folder):
    (ep,), backend, _ = run(folder, LOOP, {"researcher": ["<calc>1+2+3</calc>"]})  # 17 bytes, cut at 16
    assert [c[0].max_tokens for c in backend.calls] == [16, 8]  # 24 - 16 left; then nothing: no third turn
    assert [len(e.members[0].response_token_ids) for e in ep.events] == [16, 8]
    assert ep.answer is None and ep.spent == {("researcher", 1): 24}


def test_a_budget_bounds_the_compiled_token_count(folder):
    (folder / "t.srpo").write_text(HEAD + LOOP)
    assert load_workflow(folder / "t.srpo").graph.bounds.tokens == 24  # not 3 turns x 16
    (folder / "t.srpo").write_text(HEAD + LOOP.replace(", budget = 24", ""))
    assert load_workflow(folder / "t.srpo").graph.bounds.tokens == 48


def test_retries_count_in_the_compiled_token_bound(folder):
    (folder / "t.srpo").write_text(HEAD + RETRY.replace("(retries", "(max_tokens = 10, retries"))
    assert load_workflow(folder / "t.srpo").graph.bounds.tokens == 30


# ---- several tool calls in one turn --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,parsed",
    [
        ("<calc>1+2</calc> <calc>3*4</calc>", Parsed(True, {"action": "calc", "value": ["1+2", "3*4"]})),
        ("<calc>1+2</calc>", Parsed(True, {"action": "calc", "value": ["1+2"]})),
        ("<answer>3</answer>", Parsed(True, {"action": "answer", "value": "3"})),
    ],
)
def test_a_tool_action_may_repeat_up_to_calls_times(text, parsed):
    assert parse_act_calls(text, ("calc", "answer"), 2) == parsed


@pytest.mark.parametrize(
    "text,error",
    [
        ("<calc>1</calc><calc>2</calc><calc>3</calc>", "at most 2 <calc> calls in one turn, found 3"),
        ("<calc>1</calc><calc> </calc>", "empty <calc>"),
        ("<calc>1</calc><calc>2", "unbalanced <calc> tags: 2 opening and 1 closing"),
        ("<answer>1</answer><answer>2</answer>", "found 2 opening"),
        ("<calc>1</calc><answer>2</answer>", "expected exactly one action"),
    ],
)
def test_too_many_or_broken_calls_are_invalid(text, error):
    parsed = parse_act_calls(text, ("calc", "answer"), 2)
    assert not parsed.valid and error in parsed.error


def test_every_call_of_every_episode_is_served_in_one_batch_in_order(folder):
    body = LOOP.replace("max_tokens = 16, budget = 24", "calls = 2")
    replies = {"researcher": ["<calc>a</calc><calc>b</calc>", "<calc>c</calc>"] + ["<answer>1</answer>"] * 2}
    (one, two), _, wf = run(folder, body, replies, rows=2)
    calls = [json.loads(line) for line in (folder / "calls.log").read_text().splitlines()]
    assert calls == [["a", "b", "c"]]  # one call: episode 1's two, then episode 2's
    assert [o["query"] for o in one.events[0].observations] == ["a", "b"] and one.tool_calls == 2
    assert [h.observation["result"] for h in one.history if isinstance(h, ObservationEntry)] == ["A", "B"]
    assert one.answer == "1" and two.answer == "1"
    assert wf.graph.bounds.tool_calls == 6  # 3 rounds x 1 replica x 2 calls


def test_calls_need_an_agent_whose_action_calls_a_tool(folder):
    body = LOOP.replace("budget = 24", "calls = 2").replace("act(calc, answer)", "act(answer)")
    body = body.replace("    call calc on researcher\n", "")
    found = diagnostics(folder, body.replace("tool calc", "# tool"))
    assert ("E074", 5, 81) in [d[:3] for d in found]


# ---- replicas that stop one by one ----------------------------------------------------------------------

POOL = (
    TOOL
    + """agent worker[3] uses lm prompt "p.j2" emits act(calc, answer) with (stop = replica)
repeat at most 4 {
    act worker
    call calc on worker
} until worker == answer
reward exact_match(worker, task.answers)
"""
)


def test_a_replica_that_answered_stops_and_the_others_go_on(folder):
    replies = [
        "<answer>1</answer>", "<calc>a</calc>", "<calc>b</calc>",  # round 1: replica 1 answers
        "<calc>c</calc>", "<answer>1</answer>",  # round 2: replicas 2 and 3; 3 answers
        "<answer>1</answer>",  # round 3: replica 2 alone
    ]  # fmt: skip
    (ep,), backend, wf = run(folder, POOL, {"worker": replies})
    assert [e.cardinality for e in ep.events] == [3, 2, 1]
    assert [[m.replica for m in e.members] for e in ep.events] == [[1, 2, 3], [2, 3], [2]]
    assert [len(c) for c in backend.calls] == [3, 2, 1]
    assert ep.state["worker"] == "answer" and ep.loops and len(ep.events) == 3
    assert ep.tool_calls == 3 and ep.answer == "1"
    (node,) = wf.graph.event_nodes
    assert node.cardinality == (1, 3)


def test_without_stop_the_pool_acts_together(folder):
    replies = ["<answer>1</answer>", "<calc>a</calc>", "<calc>b</calc>"]
    (ep,), _, _ = run(folder, POOL.replace(" with (stop = replica)", ""), {"worker": replies})
    assert [e.cardinality for e in ep.events] == [3, 3, 3, 3]  # MIXED every round, to the bound


def test_stop_needs_an_acting_agent(folder):
    body = POOL.replace("act(calc, answer)", "boxed").replace("    call calc on worker\n", "")
    body = body.replace("} until worker == answer", "}").replace("tool calc", "# tool")
    assert ("E075", 5, 57) in [d[:3] for d in diagnostics(folder, body)]


# ---- shuffle ---------------------------------------------------------------------------------------------


def test_shuffle_is_seeded_by_the_renderer(folder):
    (folder / "s.j2").write_text("{{ team_context | shuffle | join(',') }}")
    renderer = PromptRenderer([folder])
    items = {"team_context": list("abcdefgh")}
    orders = {renderer.render("s.j2", items, shuffle_seed=s) for s in range(8)}
    assert renderer.render("s.j2", items, shuffle_seed=3) == renderer.render("s.j2", items, shuffle_seed=3)
    assert len(orders) > 1 and all(sorted(o.split(",")) == list("abcdefgh") for o in orders)


SHUFFLED = """agent solver[4] uses lm prompt "p.j2" emits boxed
agent judge uses lm prompt "s.j2" emits boxed
parallel solver
aggregate judge
reward exact_match(judge, task.answers)
"""


def test_the_same_seed_episode_and_step_give_the_same_order(folder):
    (folder / "s.j2").write_text("{% for o in team_context | shuffle %}{{ o.replica }}{% endfor %}")
    replies = {"solver": ["\\boxed{1}"], "judge": ["\\boxed{1}"]}

    (folder / "t.srpo").write_text(HEAD + SHUFFLED)
    wf = load_workflow(folder / "t.srpo")

    def judged(seed: int) -> list[str]:
        backend = Logged(replies)
        Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf)).run(
            task_data(wf)[:2], samples=4, seed=seed
        )
        return [r.prompt for r in backend.calls[1]]

    first = judged(0)
    assert judged(0) == first and sorted(first[0]) == list("1234")
    assert len(set(first)) > 1  # the episodes' orders differ
    assert judged(1) != first


def test_validate_knows_the_filter(folder):
    (folder / "typo.j2").write_text("{{ task.question }}\n{{ team_context | shufle }}")
    (folder / "s.j2").write_text("{{ team_context | shuffle | join(',') }}")
    assert diagnostics(folder, SHUFFLED) == []
    result = analyze(HEAD + SHUFFLED.replace("s.j2", "typo.j2"), str(folder / "t.srpo"), [folder])
    assert [(d.code, d.span.line, d.message, d.hint) for d in result.diagnostics] == [
        ("E081", 5, "template `typo.j2` line 2: no filter named `shufle`", "did you mean `shuffle`?")
    ]


# ---- the shipped pool ----------------------------------------------------------------------------------


def test_the_shipped_react_pool_runs_its_workers_one_by_one():
    wf = load_workflow(ROOT / "workflows/react_pool.srpo")
    replies = {
        "worker": [
            "<calc>3+4</calc><calc>7*2</calc>", "<answer>7</answer>", "bad",  # turn 1; replica 3 broke it
            "<calc>3+4</calc>",  # replica 3's retry
            "<answer>7</answer>", "<answer>8</answer>",  # turn 2: replicas 1 and 3 answer
        ],
        "aggregator": ["FINAL: \\boxed{7}"],
    }  # fmt: skip
    backend = Logged(replies)
    task = {"id": "t", "question": "3+4", "answer": "7"}
    (ep,) = Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf)).run([task], seed=5)
    assert [e.cardinality for e in ep.events] == [3, 2, 1]
    assert [len(c) for c in backend.calls] == [3, 1, 2, 1]  # turn 1, its retry, turn 2, the aggregator
    assert [t.text for t in ep.events[0].tries] == ["bad"] and ep.invalid_actions == 1
    assert [o["query"] for o in ep.events[0].observations] == ["3+4", "7*2", "3+4"]
    assert ep.tool_calls == 3 and ep.reward == 1.0 and ep.team_return == pytest.approx(0.9)
    prompt = backend.calls[-1][0].prompt
    assert prompt.startswith("A 3+4=") and sorted(prompt.split("=")[1].split()) == ["7", "7", "8"]
    assert not wf.graph.agents["aggregator"].trained
