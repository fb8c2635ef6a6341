"""A condition means what it says, wherever it stands: `until`, `if` (its arm and its `else` arm), `break
if`, nested in loops and branches, on a verdict, an action or an environment, with `==` and with `!=`.

One table: each construct with each operator and one scripted run. A row checks the compiled graph (the
guard of one edge, as `when` writes it), the executor's path (the events it took, in order) and that
`fmt` keeps the text, operator included."""

from pathlib import Path

import pytest

from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang.tooling.format import format_source
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data

USER = """def load(split):
    return [{"id": "q", "question": "3+4", "answer": "7"}]


def box(outputs, row, state):
    return {}, "done" in outputs["solver"][-1]["text"]
"""

HEAD = """workflow conditions

policy lm = hf("m") frozen
task "user.py:load"()
env box = "user.py:box"()

agent solver   uses lm prompt "p.j2" emits boxed
agent verifier uses lm prompt "p.j2" emits verdict(approve, reject)
agent worker   uses lm prompt "p.j2" emits act(search, answer)
agent writer   uses lm prompt "p.j2" emits final_boxed

"""
TAIL = """
aggregate writer
reward exact_match(writer, task.answer)
"""

# The steps of each construct; `{op}` is the operator of every condition in it.
CONSTRUCTS = {
    "until-verdict": """repeat at most 3 {
    verify verifier
} until verifier {op} reject""",
    "until-action": """repeat at most 3 {
    act worker
} until worker {op} answer""",
    "until-env": """repeat at most 3 {
    revise solver
    step box on solver
} until box {op} done""",
    "if": """verify verifier
if verifier {op} reject {
    revise solver
}""",
    "if-else": """verify verifier
if verifier {op} approve {
    revise solver
} else {
    act worker
}""",
    "if-env": """revise solver
step box on solver
if box {op} done {
    act worker
}""",
    "if-in-loop": """repeat at most 2 {
    verify verifier
    if verifier {op} reject {
        revise solver
    }
}""",
    "if-in-if": """verify verifier
act worker
if verifier {op} approve {
    if worker {op} answer {
        revise solver
    }
}""",
    "break": """repeat at most 3 {
    verify verifier
    break if verifier {op} approve
    revise solver
}""",
    "break-in-else": """repeat at most 3 {
    verify verifier
    act worker
    if worker {op} search {
        revise solver
    } else {
        break if verifier {op} approve
    }
}""",
    "break-and-until": """repeat at most 3 {
    act worker
    break if worker {op} answer
    verify verifier
} until verifier {op} approve""",
    "until-in-loop": """repeat at most 2 {
    repeat at most 2 {
        verify verifier
    } until verifier {op} approve
    revise solver
}""",
    "break-in-loop": """repeat at most 2 {
    repeat at most 3 {
        verify verifier
        break if verifier {op} approve
    }
    revise solver
}""",
    "if-before-only": """repeat at most 2 {
    act worker
    break if worker {op} answer
}
if worker {op} answer {
    act worker only answer
}""",
    "if-after-keep": """act worker branch 2 keep first by exact_match(task.answer)
if worker {op} answer {
    revise solver
}""",
    "if-after-tree": """act worker branch 2
if worker {op} answer {
    revise solver
}""",
}

# An event by its type, a node by its short name: V verify, R revise, A act (A2 the second act step),
# W aggregate; `box` the environment's step. On a tree, an event after the branch is suffixed by its path.
SHORT = {
    "verify:verifier": "V",
    "revise:solver": "R",
    "act:worker": "A",
    "act:worker#2": "A2",
    "aggregate:writer": "W",
}

# (construct, operator, the replies: V verdicts, A actions, S solver answers (the environment is `done`
# when the solver's last answer says so), each cycled; the path taken; (edge, its guard)).
TABLE = [
    ("until-verdict", "==", "V:approve", "V V V W", ("V>V", "verifier != reject and loop < 3")),
    ("until-verdict", "!=", "V:approve", "V W", ("V>V", "verifier == reject and loop < 3")),
    ("until-action", "==", "A:search,answer,search", "A A W", ("A>A", "worker != answer and loop < 3")),
    ("until-action", "!=", "A:search,answer,search", "A W", ("A>A", "worker == answer and loop < 3")),
    ("until-env", "==", "S:running,done", "R R W", ("box>R", "box != done and loop < 3")),
    ("until-env", "!=", "S:running,done", "R W", ("box>R", "box == done and loop < 3")),
    ("if", "==", "V:reject", "V R W", ("V>R", "verifier == reject")),
    ("if", "!=", "V:reject", "V W", ("V>R", "verifier != reject")),
    ("if-else", "==", "V:approve A:answer", "V R W", ("V>A", "verifier != approve")),
    ("if-else", "!=", "V:approve A:answer", "V A W", ("V>A", "verifier == approve")),
    ("if-env", "==", "S:running A:answer", "R W", ("box>A", "box == done")),
    ("if-env", "!=", "S:running A:answer", "R A W", ("box>A", "box != done")),
    ("if-in-loop", "==", "V:reject,approve", "V R V W", ("V>V", "verifier != reject and loop < 2")),
    ("if-in-loop", "!=", "V:reject,approve", "V V R W", ("V>V", "verifier == reject and loop < 2")),
    ("if-in-if", "==", "V:reject A:search", "V A W", ("A>R", "verifier == approve and worker == answer")),
    ("if-in-if", "!=", "V:reject A:search", "V A R W", ("A>R", "verifier != approve and worker != answer")),
    ("break", "==", "V:reject,approve", "V R V W", ("V>W", "verifier == approve")),
    ("break", "!=", "V:reject,approve", "V W", ("V>W", "verifier != approve")),
    (
        "break-in-else",
        "==",
        "V:reject,approve A:answer",
        "V A V A W",
        (
            "A>W",
            "(worker != search and verifier == approve) or (worker != search and verifier != approve and loop >= 3)",
        ),
    ),
    (
        "break-in-else",
        "!=",
        "V:reject,approve A:answer",
        "V A R V A R V A R W",
        (
            "A>W",
            "(worker == search and verifier != approve) or (worker == search and verifier == approve and loop >= 3)",
        ),
    ),
    (
        "break-and-until",
        "==",
        "A:search,search,answer V:reject,approve",
        "A V A V W",
        ("V>A", "verifier != approve and loop < 3"),
    ),
    (
        "break-and-until",
        "!=",
        "A:answer V:approve,reject",
        "A V A V W",
        ("V>A", "verifier == approve and loop < 3"),
    ),
    (
        "until-in-loop",
        "==",
        "V:approve,reject,reject,reject",
        "V R V V R W",
        ("V>V", "verifier != approve and loop2 < 2"),
    ),
    (
        "until-in-loop",
        "!=",
        "V:approve,reject,reject,reject",
        "V V R V R W",
        ("V>V", "verifier == approve and loop2 < 2"),
    ),
    (
        "break-in-loop",
        "==",
        "V:approve,reject,reject,reject,reject",
        "V R V V V R W",
        ("V>R", "verifier == approve or (verifier != approve and loop2 >= 3)"),
    ),
    (
        "break-in-loop",
        "!=",
        "V:approve,reject,reject,reject,reject",
        "V V R V R W",
        ("V>R", "verifier != approve or (verifier == approve and loop2 >= 3)"),
    ),
    ("if-before-only", "==", "A:search,answer,answer", "A A A2 W", ("A>A2", "worker == answer")),
    ("if-before-only", "!=", "A:search,answer,answer", "A A2 W", ("A>A2", "worker != answer")),
    ("if-after-keep", "==", "A:oops,answer", "A A R W", ("A>R", "worker == answer")),
    ("if-after-keep", "!=", "A:oops,answer", "A A W", ("A>R", "worker != answer")),
    ("if-after-tree", "==", "A:search,answer", "A A W.0 R.1 W.1", ("A>R", "worker == answer")),
    ("if-after-tree", "!=", "A:search,answer", "A A R.0 W.1 W.0", ("A>R", "worker != answer")),
]

_REPLY = {"V": "<verify>{}</verify>", "A": "<{0}>x</{0}>", "S": "\\boxed{{{}}}"}
_ROLE = {"V": "verifier", "A": "worker", "S": "solver"}


def _script(replies: str) -> dict[str, list[str]]:
    """`V:approve,reject A:search` -> the scripted backend's replies of each role (others: `*`)."""
    script = {"*": ["\\boxed{7}"]}
    for part in replies.split():
        key, words = part.split(":")
        script[_ROLE[key]] = [_REPLY[key].format(w) for w in words.split(",")]
    return script


def _short(data: dict) -> str:
    return SHORT.get(data.get("event_type", ""), data.get("env") or data["kind"])


def _guard(graph, edge: str) -> str:
    """The `when` of the edge `SRC>DST` (nodes by their short names)."""
    names = {v: _short(d) for v, d in graph.nodes(data=True)}
    src, dst = edge.split(">")
    (when,) = [d["when"] for u, v, d in graph.edges(data=True) if (names[u], names[v]) == (src, dst)]
    return when


def _path(episode) -> str:
    """The events the episode took, in order; on a tree, those after a branch with their path."""
    return " ".join(SHORT[e.event_type] + e.event_id.split("/")[1][1:] for e in episode.events)


@pytest.mark.parametrize(
    ("construct", "op", "replies", "path", "edge"), TABLE, ids=[f"{c} {op}" for c, op, *_ in TABLE]
)
def test_a_condition_means_its_operator(tmp_path: Path, construct, op, replies, path, edge):
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "p.j2").write_text("{{ task.question }}\n")
    source = HEAD + CONSTRUCTS[construct].replace("{op}", op) + "\n" + TAIL
    (tmp_path / "w.srpo").write_text(source)
    assert format_source(source) == source  # `fmt` keeps every condition as written
    wf = load_workflow(tmp_path / "w.srpo")
    executor = Executor(wf.graph, {"lm": ScriptedBackend(_script(replies))}, wf.renderer(), build_tools(wf))
    (episode,) = executor.run(task_data(wf))
    assert (_guard(wf.graph.to_networkx(), edge[0]), _path(episode)) == (edge[1], path)


def test_the_table_has_every_construct_with_both_operators():
    rows = sorted((c, op) for c, op, *_ in TABLE)
    assert rows == sorted((c, op) for c in CONSTRUCTS for op in ("==", "!="))
