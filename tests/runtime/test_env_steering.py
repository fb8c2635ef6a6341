"""Environments that steer (docs/dsl.md, "Environments that steer"): the words a step returns, which
conditions test; the replicas a step selects (`parallel P by ENV`); a first step that reads no outputs;
credit keys in an environment's rewards; a Python reward reading each environment. Checked with `ast`,
run with the scripted backend, failures one line naming the user's file:line."""

import json
import textwrap
from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang import analyze
from srpo_dsl.runtime.credit import role_rounds, summed_returns
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
from srpo_dsl.runtime.traces import SCHEMA, read_traces
from srpo_dsl.runtime.usercode import UserCodeError
from tests.support.clitools import cli
from tests.support.episodes import make_event, make_member

USER = """
def load(split, n=1):
    return [{"question": f"q{i}"} for i in range(n)]

# each step: (the word, the replicas of `p` that act next)
PLAN = [("expand", [3, 1]), ("expand", []), ("expand", [2]), ("solved", [])]

def grow(outputs, row, state):
    n = state["n"] = state.get("n", 0) + 1
    word, chosen = PLAN[n - 1]
    seen = [(o["replica"], o["text"]) for o in outputs.get("p", [])]
    return {"p": f"step {n} saw {seen}"}, word, float(n), {"p": chosen}
"""

WORKFLOW = """workflow w
policy lm = hf("m")
task "user.py:load"(n = 1)
env tree = "user.py:{fn}"(timeout = 5) emits verdict(expand, solved), route(p)
agent p[3] uses lm prompt "p.j2" emits text
agent q uses lm prompt "q.j2" emits text
step tree
repeat at most 4 {{
    parallel p by tree
    step tree on p
    if tree == expand {{
        parallel q
    }}
}} until tree == solved
reward tree invalid -0.5
"""


def make(tmp_path: Path, code: str = "", fn: str = "grow", workflow: str = WORKFLOW) -> Path:
    (tmp_path / "user.py").write_text(USER + textwrap.dedent(code))
    (tmp_path / "p.j2").write_text("P{{ replica }} {{ observation }} h={{ history | length }}")
    (tmp_path / "q.j2").write_text("Q {{ observation }}")
    path = tmp_path / "w.srpo"
    path.write_text(workflow.format(fn=fn))
    return path


def execute(path: Path, script: dict | None = None, samples: int = 1):
    wf = load_workflow(path)
    backends = {name: ScriptedBackend(script or SCRIPT) for name in wf.graph.policies}
    return Executor(wf.graph, backends, wf.renderer(), build_tools(wf)).run(task_data(wf), samples=samples)


def prompt(member) -> str:
    return bytes(member.prompt_token_ids).decode()


SCRIPT = {"p": ["x"], "q": ["y"]}


# ---- the checks ----------------------------------------------------------------------------------


def diagnostics(tmp_path: Path, old: str = "", new: str = "") -> list[tuple[str, int, int, str]]:
    path = make(tmp_path)
    text = path.read_text()
    assert old in text, old
    result = analyze(text.replace(old, new, 1), str(path), [tmp_path])
    return [(d.code, d.span.line, d.span.col, d.message) for d in result.diagnostics]


def test_the_base_workflow_is_clean(tmp_path):
    assert diagnostics(tmp_path) == []


EMITS = "emits verdict(expand, solved), route(p)"


@pytest.mark.parametrize(
    "old,new,expected",
    [
        (
            EMITS,
            "emits boxed, route(p)",
            (
                "E064",
                4,
                46,
                "an environment emits `verdict(...)` (the words its steps return) and `route(POOL)` "
                "(a pool whose replicas it selects), not `boxed`",
            ),
        ),
        (
            EMITS,
            'emits "user.py:grow"',
            ("E064", 4, 46, "an environment emits `verdict(...)` (the words its steps return) and"),
        ),
        (
            EMITS,
            "emits verdict(expand), verdict(solved), route(p)",
            ("E064", 4, 63, "`verdict` is listed twice: one `verdict(...)` lists every word"),
        ),
        (
            EMITS,
            "emits verdict(expand, solved), route(p), route(p)",
            ("E064", 4, 87, "the pool `p` is selected twice"),
        ),
        (
            EMITS,
            "emits verdict(expand, expand), route(p)",
            ("E032", 4, 62, "`verdict` word `expand` is listed twice"),
        ),
        (EMITS, "emits verdict(expand, solved), route(x)", ("E012", 4, 77, "undefined agent `x`")),
        (
            EMITS,
            "emits verdict(expand, solved), route(p, q)",
            ("E031", 4, 71, "`route` names exactly one pool: `route(solver)`"),
        ),
        (
            "parallel p by tree",
            "parallel q by tree",
            ("E065", 9, 19, "`tree` does not select replicas of `q`: it selects `p`"),
        ),
        (
            ", route(p)",
            "",
            ("E065", 9, 19, "`tree` does not select replicas of `p`: it selects none"),
        ),
        (
            "step tree\n",
            "",
            (
                "E066",
                8,
                5,
                "`parallel p by tree` needs a `step tree` before it, in its block or a block around it",
            ),
        ),
        (
            "step tree\nrepeat at most 4 {\n",
            "repeat at most 4 {\n    if tree == expand { step tree }\n",
            (
                "E066",
                9,
                5,
                "`parallel p by tree` needs a `step tree` before it, in its block or a block around it",
            ),
        ),
        (
            "until tree == solved",
            "until tree == done",
            ("E061", 14, 17, "`tree` never returns `done` (its words: expand, solved)"),
        ),
        (
            "if tree == expand",
            "if tree == expnd",
            ("E061", 11, 16, "`tree` never returns `expnd` (its words: expand, solved)"),
        ),
        (
            "step tree\n",
            "if tree == expand { parallel q }\nstep tree\n",
            ("E062", 7, 4, "unreachable: `tree` has not stepped before this condition"),
        ),
        ("step tree\n", "step tre\n", ("E014", 7, 6, "undefined environment `tre`")),
    ],
)
def test_each_mistake_is_one_positioned_error(tmp_path, old, new, expected):
    found = diagnostics(tmp_path, old, new)
    code, line, col, message = expected
    assert any(f[:3] == (code, line, col) and f[3].startswith(message) for f in found), found


def test_an_environment_without_words_still_tests_done_and_hints_at_words(tmp_path):
    found = diagnostics(tmp_path, "emits verdict(expand, solved), route(p)", "emits route(p)")
    assert ("E061", 11, 16, "`tree` is an environment: a condition tests `done`, not `expand`") in found
    path = make(tmp_path)
    text = path.read_text().replace(EMITS, "emits route(p)").replace("tree == expand", "tree != done")
    result = analyze(text.replace("until tree == solved", "until tree == done"), str(path), [tmp_path])
    assert result.diagnostics == []


# ---- the graph ------------------------------------------------------------------------------------


def test_the_graph_has_the_first_step_the_selected_event_and_the_words(tmp_path):
    path = make(tmp_path)
    graph = analyze(path.read_text(), str(path), [tmp_path]).graph
    nodes = dict(graph.nodes(data=True))
    assert nodes["n1"]["kind"] == "env" and nodes["n1"]["label"] == "step tree" and nodes["n1"]["on"] == []
    assert nodes["n2"]["routed_by"] == "tree" and nodes["n2"]["cardinality"] == {"min": 1, "max": 3}
    assert nodes["n2"]["label"] == "parallel p by tree"
    assert graph.graph["envs"]["tree"]["words"] == ["expand", "solved"]
    assert graph.graph["envs"]["tree"]["selects"] == ["p"]
    guards = {(u, v): d["when"] for u, v, d in graph.edges(data=True)}
    assert guards[("n1", "n2")] == "always"
    assert guards[("n3", "n4")] == "tree == expand"
    assert guards[("n3", "end")] == "tree == solved or (tree != expand and loop >= 4)"
    assert graph.graph["max_events"] == 8 and graph.graph["max_calls"] == 16  # (3 + 1) per round


# ---- running -------------------------------------------------------------------------------------


def test_the_environment_steps_first_selects_who_acts_and_its_words_steer(tmp_path):
    (ep,) = execute(make(tmp_path))
    # step 1 (before anyone): p 3 and 1; step 2: nobody, q; step 3: p 2, q; step 4: solved
    assert [(e.event_type, [m.replica for m in e.members]) for e in ep.events] == [
        ("parallel:p", [1, 3]),
        ("parallel:q", [1]),
        ("parallel:q", [1]),
        ("parallel:p", [2]),
    ]
    assert [e.cardinality for e in ep.events] == [2, 1, 1, 1]
    assert [r.word for r in ep.envs["tree"].log] == ["expand", "expand", "expand", "solved"]
    assert ep.state["tree"] == "solved" and not ep.envs["tree"].done  # `done` is a word it does not have
    # the first observation reached the first prompts; every replica of the pool has it in its history
    assert [prompt(m) for m in ep.events[0].members] == ["P1 step 1 saw [] h=3", "P3 step 1 saw [] h=3"]
    # an empty selection acts nobody: step 3 read p's last outputs again
    obs = [o["result"] for o in ep.observations if o["agent"] == "p"]
    assert obs[1:3] == ["step 2 saw [(1, 'x'), (3, 'x')]", "step 3 saw [(1, 'x'), (3, 'x')]"]
    assert ep.reward == 1.0 + 2.0 + 3.0 + 4.0 and ep.team_return == ep.reward and ep.keyed_returns == {}


def test_the_trace_records_the_words_and_audit_prints_them(tmp_path):
    path = make(tmp_path)
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(SCRIPT))
    out = tmp_path / "out"
    r = cli("run", path, "--backend", "scripted", "--model", script, "--out", out)
    assert r.returncode == 0, r.stderr
    line = json.loads((out / "traces.jsonl").read_text())
    assert line["schema"] == SCHEMA == "srpo-trace/4"
    assert line["envs"] == {
        "tree": {"steps": 4, "done": False, "reward": 10.0, "words": ["expand", "expand", "expand", "solved"]}
    }
    audit = cli("audit", out)
    assert audit.returncode == 0, audit.stderr
    assert "env tree: 4 steps, done False, reward +10.000, words expand expand expand solved" in audit.stdout
    line["schema"] = "srpo-trace/2"  # written before words: read with the default
    del line["envs"]["tree"]["words"]
    (out / "traces.jsonl").write_text(json.dumps(line) + "\n")
    (old,) = read_traces(out / "traces.jsonl")
    assert old.envs["tree"].words == [] and old.envs["tree"].steps == 4
    assert cli("view", out).returncode == 0 and cli("audit", out).returncode == 0


# ---- credit per member and per round from an environment ------------------------------------------


def test_summed_returns_add_each_steps_most_specific_key():
    """Two steps; p acted in rounds 1 (replicas 1, 2) and 2 (replica 1)."""
    events = [
        make_event("t/0", 1, "parallel:p", make_member("p", 1), make_member("p", 2, 1)),
        make_event("t/0", 2, "parallel:p", make_member("p", 1)),
    ]
    steps = [(0.0, {"p#1@1": 0.5}), (1.0, {"p#2": 3.0, "p@2": 2.0})]
    assert summed_returns(steps, events) == {
        "p#1@1": 0.5 + 1.0,  # its key at step 1, the step's own reward at step 2
        "p#2@1": 0.0 + 3.0,
        "p#1@2": 0.0 + 2.0,
    }
    assert summed_returns([(1.0, {}), (2.0, {})], events) == {}  # no key: every member gets the score


CREDIT = """
def credited(outputs, row, state):
    n = state["n"] = state.get("n", 0) + 1
    word, chosen = PLAN[n - 1]
    credit = {f"p#{o['replica']}@{state['rounds']}": 5.0 * o["replica"] for o in outputs.get("p", []) if n in (2, 4)}
    state["rounds"] = state.get("rounds", 0) + (1 if chosen else 0)
    return {}, word, {"tree": 1.0, **credit}, {"p": chosen}
"""


def test_keyed_rewards_become_each_members_return_with_the_penalty(tmp_path):
    """Steps 2 and 4 credit the p members of rounds 1 and 2; every step's own reward is 1."""
    (ep,) = execute(make(tmp_path, CREDIT, fn="credited"), {"p": ["x"], "q": ["y"]})
    assert ep.reward == 4.0 and ep.invalid_actions == 0
    assert ep.keyed_returns == {
        "p#1@1": 1.0 + 5.0 + 1.0 + 1.0,  # keyed at step 2
        "p#3@1": 1.0 + 15.0 + 1.0 + 1.0,
        "q#1@1": 4.0,
        "q#1@2": 4.0,
        "p#2@2": 1.0 + 1.0 + 1.0 + 10.0,  # keyed at step 4
    }
    rounds = role_rounds(ep.events)  # resolved once, when the reward was recorded:
    got = {
        (m.role, m.replica, r[m.role]): ep.returns[(e.event_id, m.member_index)]
        for e, r in zip(ep.events, rounds)
        for m in e.members
    }
    assert got[("p", 3, 1)] == 18.0 and got[("q", 1, 2)] == 4.0


def test_a_python_reward_reads_each_environments_state_words_and_rewards(tmp_path):
    code = """
    def score(answer, row, episode):
        tree = episode.envs["tree"]
        return {"q": tree.reward, "p": float(len(tree.steps)), "q@1": float(tree.state["n"]),
                "p#2": float(tree.steps[2].selected["p"][0]), "q@2": float(tree.word == "solved")}
    """
    text = WORKFLOW.replace("reward tree invalid -0.5", 'reward "user.py:score"(q)')
    (ep,) = execute(make(tmp_path, code, workflow=text))
    assert ep.keyed_returns == {"q": 10.0, "p": 4.0, "q@1": 4.0, "p#2": 2.0, "q@2": 1.0}
    assert ep.reward == 10.0


# ---- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,reason",
    [
        (
            "({}, 'grown', 0.0, {'p': []})",
            "returned the word 'grown' on task 'train-0', step 1: `tree` returns one of its words (expand, solved)",
        ),
        (
            "({}, True, 0.0, {'p': []})",
            "returned the word True on task 'train-0', step 1: `tree` returns one of its",
        ),
        (
            "({}, 'expand', 0.0)",
            "returned ({}, 'expand', 0.0) on task 'train-0', step 1: an environment returns "
            "(observations, WORD, reward, {pool: [replica, ...]}[, key]) (`tree` selects replicas)",
        ),
        (
            "({}, 'expand', 0.0, {})",
            "returned the selection {} on task 'train-0', step 1: `tree` selects {'p': [replica, ...]} "
            "(an empty list: nobody acts)",
        ),
        ("({}, 'expand', 0.0, {'p': [], 'q': [1]})", "returned the selection {'p': [], 'q': [1]} on"),
        (
            "({}, 'expand', 0.0, {'p': [4]})",
            "returned the replicas [4] of `p` on task 'train-0', step 1: a list of distinct replica numbers in 1..3",
        ),
        ("({}, 'expand', 0.0, {'p': [1, 1]})", "returned the replicas [1, 1] of `p` on"),
        ("({}, 'expand', 0.0, {'p': [True]})", "returned the replicas [True] of `p` on"),
        ("({}, 'expand', 0.0, {'p': '1'})", "returned the replicas '1' of `p` on"),
        (
            "({}, 'expand', {'p': 1.0}, {'p': []})",
            "returned the reward {'p': 1.0} on task 'train-0', step 1: a mapping holds the step's own reward "
            "under `tree` (a finite number), and credit keys",
        ),
        (
            "({}, 'expand', {'tree': 0.0, 'p#4': 1.0}, {'p': []})",
            "returned the key 'p#4' on task 'train-0', step 1: `p` has replicas 1..3",
        ),
        (
            "({}, 'expand', {'tree': 0.0, 'p@1': 1.0}, {'p': []})",
            "returned the key 'p@1' on task 'train-0', step 1: rounds count from 1, and `p` took 0 round(s)",
        ),
        (
            "({}, 'expand', {'tree': 0.0, 'r': 1.0}, {'p': []})",
            "returned scores for ['r'] on task 'train-0', step 1: the roles are p, q",
        ),
        (
            "({}, 'expand', {'tree': 0.0, 'p': float('inf')}, {'p': []})",
            "returned {'p': inf} on task 'train-0', step 1: every score is a finite number",
        ),
    ],
)
def test_a_wrong_return_is_one_line_at_the_def(tmp_path, value, reason):
    code = f"def wrong(outputs, row, state):\n    return {value}\n"
    with pytest.raises(UserCodeError) as err:
        execute(make(tmp_path, code, fn="wrong"))
    line = (USER + code).splitlines().index("def wrong(outputs, row, state):") + 1
    assert str(err.value).startswith(f"{tmp_path / 'user.py'}:{line}: wrong() {reason}"), str(err.value)


def test_an_environment_without_words_returning_a_word_is_told_to_declare_them(tmp_path):
    code = "def said(outputs, row, state):\n    return {}, 'solved'\n"
    text = WORKFLOW.replace(" emits verdict(expand, solved), route(p)", "").replace(
        "parallel p by tree", "parallel p"
    )
    text = text.replace("tree == expand", "tree != done").replace(
        "until tree == solved", "until tree == done"
    )
    with pytest.raises(UserCodeError) as err:
        execute(make(tmp_path, code, fn="said", workflow=text))
    assert str(err.value).endswith(
        "said() returned done = 'solved' on task 'train-0', step 1: `done` is a bool "
        "(to return words, declare them: `emits verdict(...)`)"
    )


def test_the_cli_stops_with_one_line_on_an_undeclared_word(tmp_path):
    path = make(tmp_path, "PLAN[1] = ('grown', [])\n")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(SCRIPT))
    r = cli("run", path, "--backend", "scripted", "--model", script, "--out", tmp_path / "out")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    line = USER.splitlines().index("def grow(outputs, row, state):") + 1
    assert last == (
        f"error: {tmp_path / 'user.py'}:{line}: grow() returned the word 'grown' on task 'train-0', step 2: "
        "`tree` returns one of its words (expand, solved)"
    )
    assert not (tmp_path / "out").exists()


def test_fmt_lays_out_the_emits_list_and_a_step_without_on():
    from srpo_dsl.lang.tooling.format import format_source

    messy = (
        'workflow w\nenv   tree=  "t.py:f" ( timeout=5 )emits verdict ( a,b ) ,route( p )\n'
        'env box = "t.py:g"()\nstep   tree\n  step tree on p ,q\n'
    )
    assert format_source(messy) == (
        'workflow w\nenv tree = "t.py:f"(timeout = 5) emits verdict(a, b), route(p)\n'
        'env box  = "t.py:g"()\nstep tree\nstep tree on p, q\n'
    )
