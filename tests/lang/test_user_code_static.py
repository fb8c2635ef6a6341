"""User code read without running it: references, `ast` checks, positioned diagnostics, graph metadata."""

import ast
import json
import sys

import pytest

from srpo_dsl.lang import analyze
from srpo_dsl.lang.usercode.pycode import USES, Params, call_problem
from tests.support.clitools import cli
from tests.support.user_code import diagnostics

USER = """
import json
from pathlib import Path

Path(__file__).with_name("imported.txt").write_text("side effect")  # must never run in validate

def score(answer, row):
    return 1.0

def score_episode(answer, row, episode):
    return 1.0

def load(split, n=10):
    return [{"question": str(i)} for i in range(n)]

def calculator(queries, precision=3):
    return [q for q in queries]

def parse(text):
    return True, text

async def async_parse(text):
    return True, text

scaled = lambda answer, row: 1.0
"""

WORKFLOW = """workflow w
policy lm = hf("m")
task "user.py:load"(n = 4)
tool calc = "user.py:calculator"(timeout = 5, precision = 2)
agent a[2] uses lm prompt "p.j2" emits "user.py:parse"
agent b uses lm prompt "p.j2" emits tag(answer)
parallel a
call calc on a
aggregate b
reward "user.py:score"(b) invalid -0.1
"""


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    return tmp_path


def test_a_valid_workflow_lists_its_code_and_runs_none_of_it(folder):
    result = analyze(WORKFLOW, str(folder / "w.srpo"), [folder])
    assert result.diagnostics == []
    refs = result.graph.graph["code"]
    assert [(r["use"], r["function"], r["line"]) for r in refs] == [
        ("loader", "load", 13),
        ("tool", "calculator", 16),
        ("parser", "parse", 19),
        ("reward", "score", 7),
    ]
    assert refs[0]["file"] == str(folder / "user.py") and refs[0]["module"] is None
    assert result.graph.graph["task"] == {"kind": "python", "ref": "user.py:load", "options": {"n": 4}}
    assert result.graph.graph["tools"]["calc"]["options"] == {"timeout": 5.0, "batch": None, "precision": 2}
    assert not (folder / "imported.txt").exists()
    user_file = str(folder / "user.py")
    assert not [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == user_file]


def test_validate_and_compile_never_import_the_module(folder):
    (folder / "w.srpo").write_text(WORKFLOW)
    for args in (["validate"], ["compile", "--emit", "json", "-o", str(folder / "g.json")]):
        r = cli(*args, folder / "w.srpo")
        assert r.returncode == 0, r.stderr
    assert not (folder / "imported.txt").exists()
    assert not list(folder.rglob("__pycache__"))
    assert json.loads((folder / "g.json").read_text())["graph"]["code"][3]["ref"] == "user.py:score"


BAD = [
    ('"user.py:score"(b)', '"user.py"(b)', "E090", "`user.py` is not a Python reference"),
    ('"user.py:score"(b)', '"user.py:9x"(b)', "E090", "`9x` is not a Python function name"),
    ('"user.py:score"(b)', '"nope.py:score"(b)', "E091", "Python file `nope.py` not found"),
    ('"user.py:score"(b)', '"no_such_pkg.mod:score"(b)', "E091", "module `no_such_pkg.mod` not found"),
    ('"user.py:score"(b)', '"user.py:scor"(b)', "E093", "defines no top-level function `scor`"),
    (
        '"user.py:score"(b)',
        '"user.py:parse"(b)',
        "E094",
        "it takes 1 positional argument(s), srpo-dsl passes 2",
    ),
    ('"user.py:parse"', '"user.py:score_episode"', "E094", "its parameter(s) `episode` would get no value"),
    ('"user.py:parse"', '"user.py:async_parse"', "E094", "is `async`"),
    ("precision = 2", "digits = 2", "E094", "it has no parameter `digits` (and no **kwargs)"),
    ('"user.py:load"(n = 4)', '"user.py:parse"(n = 4)', "E094", "it has no parameter `split`"),
    ('"user.py:load"(n = 4)', '"user.py:load"(4)', "E024", "the options of Python code are named"),
    ("timeout = 5,", "timeout = 0,", "E024", "Python tool: `timeout` must be greater than 0"),
    ('hf("m")', '"user.py:score"("m")', "E095", "a policy is a model, not Python code"),
    ('"user.py:score"(b)', '"user.py:score"(b, task.answer)', "E095", "receives the whole task row"),
    ("reward ", "reward exact_match(b) #", "E029", "the reference answer is a task field"),
    ("emits tag(answer)", "emits tag", "E031", "`tag` names exactly one tag"),
    ("call calc on a", "call calc on b", "E062", None),
]


@pytest.mark.parametrize("old,new,code,message", BAD, ids=[f"{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_bad_references_are_positioned_errors(folder, old, new, code, message):
    text = WORKFLOW.replace(old, new, 1)
    assert text != WORKFLOW
    found = diagnostics(folder, text)
    hits = [d for d in found if d[0] == code and (message is None or message in d[3])]
    assert hits, found
    line = next(i for i, row in enumerate(text.splitlines(), 1) if new.split("#")[0].strip() in row)
    assert hits[0][1] == line
    assert not (folder / "imported.txt").exists()


def test_did_you_mean_and_the_caret_under_the_reference(folder):
    (folder / "w.srpo").write_text(WORKFLOW.replace('"user.py:score"(b)', '"user.py:scores"(b)'))
    r = cli("validate", folder / "w.srpo")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert (
        lines[0]
        == f"{folder / 'w.srpo'}:10:8: error[E093]: {folder / 'user.py'} defines no top-level function `scores`"
    )
    assert lines[2].index("^") == lines[1].index('"user.py:scores"') and lines[2].count("^") == len(
        '"user.py:scores"'
    )
    assert "did you mean `score`?" in lines[3]


def test_a_python_syntax_error_points_into_the_users_file(folder):
    (folder / "user.py").write_text("def score(answer, row):\n    return (\n")
    found = diagnostics(folder, WORKFLOW)
    assert found[0][:2] == ("E092", 3)
    assert f"{folder / 'user.py'}:2:" in found[0][3] and "Python syntax error" in found[0][3]


def test_names_bound_otherwise_are_warned_not_checked(folder):
    found = diagnostics(folder, WORKFLOW.replace('"user.py:score"(b)', '"user.py:scaled"(b)'))
    assert [(d[0], d[1]) for d in found] == [("W003", 10)]
    assert "bound by assignment, so its signature is not checked" in found[0][3]


def test_module_references_are_found_on_the_python_path_without_importing(folder, monkeypatch):
    pkg = folder / "mytask"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('importing the package runs code')\n")
    (pkg / "rewards.py").write_text("def graded(answer, row, episode):\n    return 0.5\n")
    monkeypatch.syspath_prepend(str(folder))
    text = WORKFLOW.replace('"user.py:score"(b)', '"mytask.rewards:graded"(b)')
    result = analyze(text, str(folder / "w.srpo"), [folder])
    assert result.diagnostics == []
    ref = result.program.code[-1]
    assert (ref.module, ref.file, ref.line, ref.arity) == ("mytask.rewards", str(pkg / "rewards.py"), 1, 3)
    assert "mytask" not in sys.modules


SIGNATURES = [
    "def f(a, b): pass",
    "def f(a, b, c): pass",
    "def f(a, b, episode=None): pass",
    "def f(a, b, scale=1.0): pass",
    "def f(a, /, b): pass",
    "def f(*args): pass",
    "def f(a, *, k): pass",
    "def f(a, *, k=1, **kw): pass",
    "def f(split, n=1): pass",
    "def f(queries, precision=3): pass",
    "def f(**kw): pass",
    "def f(split, /): pass",
]
CALLS = [(0, ("split",)), (0, ("split", "n")), (1, ()), (1, ("precision",)), (2, ()), (3, ()), (1, ("k",))]


@pytest.mark.parametrize("source", SIGNATURES)
def test_ast_and_runtime_signatures_give_the_same_answers(source):
    node = ast.parse(source).body[0]
    namespace: dict = {}
    exec(source, namespace)
    static, live = Params.of_ast(node), Params.of_callable(namespace["f"])
    assert static == live
    for npos, keywords in CALLS:
        assert static.problem(npos, keywords) == live.problem(npos, keywords)


def test_the_reward_gets_its_episode_when_it_asks_for_it():
    arity = {s: USES["reward"].arity(Params.of_ast(ast.parse(s).body[0])) for s in SIGNATURES[:4]}
    assert list(arity.values()) == [2, 3, 3, 2]  # a third parameter with a default is not the episode
    one = Params.of_ast(ast.parse("def f(a): pass").body[0])
    assert call_problem("reward", one, ()) == "it takes 1 positional argument(s), srpo-dsl passes 2"


@pytest.mark.parametrize(
    "source,arity",
    [
        ("def f(text): pass", 1),
        ("def f(text, finish): pass", 2),
        ("def f(text, finish=None): pass", 2),
        ("def f(text, strict=True): pass", 1),  # an optional second parameter of another name is not passed
        ("def f(text, why): pass", 2),  # a required one is (and receives the finish reason)
    ],
)
def test_a_parser_gets_its_finish_reason_when_it_asks_for_it(source, arity):
    assert USES["parser"].arity(Params.of_ast(ast.parse(source).body[0])) == arity


@pytest.mark.parametrize("reward,late", [('"user.py:score_episode"(a)', False), ('"user.py:score"(a)', True)])
def test_an_agent_after_the_rewarded_one_is_e070_unless_the_reward_reads_the_episode(folder, reward, late):
    """A three-argument reward gets the whole episode, so `b`'s actions after `a` reach it."""
    text = WORKFLOW.replace('reward "user.py:score"(b)', f"reward {reward}")
    codes = [(code, line, message) for code, line, _col, message, _hint in diagnostics(folder, text)]
    e070 = (
        "E070",
        9,
        "`b` acts after the last reward point: its trainable actions never reach the reward of `a`",
    )
    assert codes == ([e070] if late else [])
