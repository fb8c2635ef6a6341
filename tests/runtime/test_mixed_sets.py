"""Mixed active sets: one event whose members come from several agents and policies (`parallel a, b`)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang.analysis import analyze
from srpo_dsl.rl import setwise_loss
from srpo_dsl.rl.loop.role_metrics import MetricKeys, rollout_sums
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import load_workflow

ROOT = Path(__file__).resolve().parents[2]

TEAM = """workflow team
policy a = hf("model-a") with (temperature = 1.0)
policy b = hf("model-b") with (temperature = 0.7)
task arith(n = 4, eval_n = 2)
agent writer     uses a prompt "w.j2" emits boxed with (max_tokens = 12)
agent editor[2]  uses b prompt "e.j2" emits boxed with (max_tokens = 10)
agent judge      uses a prompt "j.j2" emits verdict(ok, no)
agent aggregator uses a prompt "g.j2" emits final_boxed
parallel writer, editor
verify judge
aggregate aggregator
reward exact_match(aggregator, task.answer)
"""


@pytest.fixture()
def team(tmp_path):
    (tmp_path / "team.srpo").write_text(TEAM)
    (tmp_path / "w.j2").write_text("W {{ task.question }}")
    (tmp_path / "e.j2").write_text("E{{ replica }} {{ task.question }}")
    (tmp_path / "j.j2").write_text("J {{ team_context | map(attribute='value') | join(',') }}")
    (tmp_path / "g.j2").write_text("G {{ team_context | map(attribute='role') | join(',') }}")
    return tmp_path


def _codes(folder: Path, old: str, new: str) -> list[tuple[str, int, int, str]]:
    assert old in TEAM
    result = analyze(TEAM.replace(old, new), str(folder / "team.srpo"), [folder])
    return [(d.code, d.span.line, d.span.col, d.message) for d in result.diagnostics]


def test_one_event_lists_every_member_slot_with_its_agent_and_policy(team):
    g = load_workflow(team / "team.srpo").graph
    node = g.event_nodes[0]
    attrs = g.to_networkx().nodes[node.id]
    assert node.event_type == "parallel:writer+editor" and node.label == "parallel writer, editor K=3"
    assert (attrs["roles"], attrs["replicas"], attrs["policy"]) == (
        ["writer", "editor", "editor"],
        [1, 1, 2],
        ["a", "b", "b"],
    )
    assert attrs["agents"] == ["writer", "editor"] and attrs["cardinality"] == {"min": 3, "max": 3}
    assert (g.bounds.events, g.bounds.calls, g.bounds.tokens) == (3, 5, 12 + 2 * 10 + 512 + 512)


@pytest.mark.parametrize(
    "old,new,code,line,col,message",
    [
        ("parallel writer, editor", "parallel writer, writer", "E049", 9, 18, "`writer` is listed twice"),
        ("parallel writer, editor", "parallel writer, judge", "E045", 9, 18, "`judge` emits `verdict`"),
        ("parallel writer, editor", "verify judge, writer", "E047", 9, 1, "`verify` takes one replica"),
        ("parallel writer, editor", "parallel writer, edtor", "E012", 9, 18, "undefined agent `edtor`"),
    ],
)
def test_mixed_set_mistakes_are_positioned(team, old, new, code, line, col, message):
    found = [d for d in _codes(team, old, new) if d[0] == code]
    assert found and found[0][1:3] == (line, col) and message in found[0][3], found


def _diagnostics(folder: Path, text: str) -> list[tuple[str, int, int, str, str | None]]:
    result = analyze(text, str(folder / "team.srpo"), [folder])
    return [(d.code, d.span.line, d.span.col, d.message, d.hint) for d in result.diagnostics]


@pytest.mark.parametrize("kind", ["parallel", "act"])
def test_every_agent_of_a_mixed_set_acts_for_the_reward(team, kind):
    """The rewarded agent may act second in a mixed set (E071 counted only the first), and is not unused."""
    last = f"verify judge\n{kind} editor, aggregator\n"
    assert _diagnostics(team, TEAM.replace("verify judge\naggregate aggregator\n", last)) == []


def test_a_loop_round_sees_every_agent_of_its_mixed_set_as_acted(team):
    """From a loop's second round on, a condition may read any agent of the set the round took (E062)."""
    text = TEAM.replace("emits verdict(ok, no)", "emits act(ok, no)").replace(
        "parallel writer, editor\nverify judge\n",
        "repeat at most 2 {\n    break if judge == ok\n    act writer, judge\n}\n",
    )
    assert _diagnostics(team, text) == [("W001", 6, 7, "`editor` is declared but never used", None)]


def test_a_late_mixed_set_names_its_trainable_agents_not_its_frozen_ones(team):
    """E070 on `parallel writer, editor` after the reward point, `writer` frozen: `editor` is the one trained."""
    text = TEAM.replace('hf("model-a")', 'hf("model-a") frozen').replace(
        "parallel writer, editor\nverify judge\naggregate aggregator\n",
        "verify judge\naggregate aggregator\nparallel writer, editor\n",
    )
    assert _diagnostics(team, text) == [
        (
            "E070",
            11,
            1,
            "`editor` acts after the last reward point: its trainable actions never reach the reward of "
            "`aggregator`",
            "move the step before the last step of `aggregator`, or put `editor` on a frozen policy "
            "(`b` is trained)",
        )
    ]
    both = _diagnostics(team, text.replace('hf("model-a") frozen', 'hf("model-a")'))
    assert [(d[3], d[4]) for d in both] == [
        (
            "`writer`, `editor` act after the last reward point: their trainable actions never reach the "
            "reward of `aggregator`",
            "move the step before the last step of `aggregator`, or put `writer`, `editor` on a frozen "
            "policy (`a`, `b` are trained)",
        )
    ]


def test_a_mixed_set_selects_no_replicas():
    (diag,) = analyze("workflow w\nparallel a, b by r\n", "t.srpo").diagnostics
    assert diag.code == "E001" and diag.span.line == 2


def test_each_member_is_rendered_and_sampled_by_its_own_agent_and_policy(team):
    wf = load_workflow(team / "team.srpo")
    seen: dict[str, list[str]] = {"a": [], "b": []}
    backends = {}
    for name, replies in (
        ("a", {"writer": ["\\boxed{1}"], "judge": ["<verify>ok</verify>"], "*": ["FINAL: \\boxed{2}"]}),
        ("b", {"editor": ["\\boxed{2}", "oops"]}),
    ):
        backend = ScriptedBackend(replies)
        generate = backend.generate
        backend.generate = lambda requests, _n=name, _g=generate, **kw: (
            seen[_n].extend(r.prompt for r in requests),
            _g(requests, **kw),
        )[1]
        backends[name] = backend
    task = {"id": "t", "question": "1+1", "answer": "2", "answers": ["2"]}
    (ep,) = Executor(wf.graph, backends, wf.renderer()).run([task])
    event = ep.events[0]
    assert [(m.role, m.replica, m.policy, m.valid) for m in event.members] == [
        ("writer", 1, "a", True),
        ("editor", 1, "b", True),
        ("editor", 2, "b", False),
    ]
    assert seen["b"] == ["E1 1+1", "E2 1+1"] and seen["a"][0] == "W 1+1"  # one call per policy
    assert event.cardinality == 3 and event.complete and ep.invalid_actions == 1
    assert seen["a"][1] == "J 1,2,None" and seen["a"][2] == "G writer,editor,editor,judge"
    assert [m.role for m in ep.last_output["editor"]] == ["editor", "editor"]
    assert [m.role for m in ep.last_output["writer"]] == ["writer"]
    assert ep.answer == "2" and ep.reward == 1.0


def test_the_set_ratio_sums_both_policies_members_and_one_advantage_reaches_each():
    """One event, K = 2, a member of policy a (2 tokens) and one of policy b (1 token), by hand."""
    cur = torch.tensor([[-0.5, -1.0], [-0.2, 0.0]], requires_grad=True)
    old = torch.tensor([[-0.6, -1.0], [-0.3, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    advantage = 1.5
    loss, metrics = setwise_loss(
        cur, old, mask, torch.tensor([7, 7]), torch.tensor([advantage, advantage]), clip_eps=0.2
    )
    log_ratio = (0.1 + 0.0 + 0.1) / math.sqrt(2)  # l_a = 0.1, l_b = 0.1, sqrt norm
    rho = math.exp(log_ratio)  # 1.152: inside 1 +- 0.2, so unclipped
    assert loss.item() == pytest.approx(-rho * advantage)
    loss.backward()
    weight = -advantage * rho / math.sqrt(2)  # d(-rho A)/d logprob of every generated token
    assert torch.allclose(cur.grad, torch.tensor([[weight, weight], [weight, 0.0]]))
    assert metrics["clip_fraction"] == 0.0 and metrics["mean_set_size"] == 2.0


def test_role_metrics_count_a_mixed_event_for_each_of_its_agents(team):
    from srpo_dsl.runtime.episode import Episode, Event, Member

    keys = MetricKeys.of(load_workflow(team / "team.srpo").graph)
    assert keys.roles == ("writer", "editor", "judge", "aggregator")

    def member(role: str, valid: bool, tokens: int) -> Member:
        return Member(0, role, 1, "a", 0, [1], [5] * tokens, [-1.0] * tokens, "", valid)

    ep = Episode("q/0", "q", 0, {})
    members = [member("writer", True, 2), member("editor", False, 3), member("editor", True, 1)]
    ep.events = [Event("e1", "parallel:writer+editor", "n1", "s", 3, True, members)]
    sums = rollout_sums(keys, [ep]).tolist()  # events, members, invalid, tokens
    assert sums[0] == [1, 1, 0, 2] and sums[1] == [1, 2, 1, 4]  # writer, editor
    assert sums[4] == [1, 3, 1, 6]  # the event type: one event of three members


@pytest.mark.slow
def test_the_mixture_trains_both_adapters(tmp_path):
    """workflows/mixture.srpo: two adapters in one active set; a short run counts it for both roles."""
    import json

    from tests.support.clitools import cli
    from tests.support.training import train_env

    out = tmp_path / "run"
    options = ["steps=2", "batch=4", "group=4", "eval_every=2", "eval_size=8", "save_every=2"]
    args = [a for o in options for a in ("--option", o)]
    done = cli("train", ROOT / "workflows/mixture.srpo", "--out", out, *args, timeout=600, env=train_env())
    assert done.returncode == 0, done.stderr[-2000:]
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["role/proposer_a/mean_k"] == 1.0 and last["role/proposer_b/mean_k"] == 1.0
    assert last["event/parallel:proposer_a+proposer_b/mean_k"] == 2.0


def test_render_gives_an_agent_acting_second_in_a_mixed_set_its_loops_turns(team):
    """`render --role editor` where `editor` acts only in `parallel writer, editor` inside a loop of 3."""
    from tests.support.clitools import cli

    (team / "e.j2").write_text("turn {{ turn }} of {{ max_turns }}")
    looped = TEAM.replace("parallel writer, editor\n", "repeat at most 3 {\n    parallel writer, editor\n}\n")
    (team / "team.srpo").write_text(looped)
    done = cli("render", team / "team.srpo", "--role", "editor")
    assert done.returncode == 0 and done.stdout.strip() == "turn 1 of 3", done.stderr
