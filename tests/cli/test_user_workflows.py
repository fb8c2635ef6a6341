"""The shipped workflows on user code (countdown.srpo, math_python.srpo), run with scripted replies."""

import importlib.util
import itertools
import json
from pathlib import Path

import pytest

from tests.support.clitools import ROOT, cli


def user_module(name: str):
    """The workflow's own Python, imported by the test (the test is its user)."""
    spec = importlib.util.spec_from_file_location(f"test_{name}", ROOT / "workflows" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


countdown = user_module("countdown")


def solve(numbers: list[int], target: int) -> str | None:
    """A left-to-right equation over all `numbers` that makes `target` (how the loader builds targets)."""
    for order in itertools.permutations(numbers):
        for ops in itertools.product("+-*/", repeat=len(numbers) - 1):
            text = str(order[0])
            for op, x in zip(ops, order[1:]):
                text = f"({text} {op} {x})"
            if countdown.reward(text, {"numbers": numbers, "target": target}) == 1.0:
                return text
    return None


def scripted_run(workflow: str, replies: dict, folder: Path) -> dict:
    """The one episode of `srpo-dsl run WORKFLOW --limit 1` with scripted replies."""
    script = folder / "replies.json"
    script.write_text(json.dumps(replies))
    out = folder / "run"
    r = cli("run", workflow, "--backend", "scripted", "--model", script, "--limit", 1, "--out", out)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "traces.jsonl").read_text())


def test_countdown_rows_are_solvable_and_the_splits_differ():
    train, heldout = countdown.make_tasks("train", n=20), countdown.make_tasks("eval", eval_n=20)
    assert len(train) == len(heldout) == 20 and train == countdown.make_tasks("train", n=20)
    assert not {tuple(r["numbers"]) for r in train} & {tuple(r["numbers"]) for r in heldout}
    assert all(solve(r["numbers"], r["target"]) for r in train[:5])


@pytest.mark.parametrize(
    "answer,score",
    [
        ("(3 + 5) * 2", 1.0),
        ("2 * (5 + 3)", 1.0),
        ("16", 0.0),  # a number that is not given
        ("(3 + 3) * 2 + 4", 0.0),  # 3 used twice
        ("(5 - 3) * 2 * 4", 1.0),
        ("5 / 0 + 16", 0.0),
        ("32 / 2", 0.0),
        ("__import__('os')", 0.0),
        (None, 0.0),
    ],
)
def test_countdown_reward_checks_the_arithmetic(answer, score):
    assert countdown.reward(answer, {"numbers": [3, 5, 2, 4], "target": 16}) == score


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<answer> (1 + 2) * 3 </answer>", (True, "(1 + 2) * 3")),
        (
            "<answer>1</answer><answer>2</answer>",
            (False, "expected exactly one <answer>...</answer>, found 2"),
        ),
        ("<answer>os.system('x')</answer>", (False, "not an arithmetic expression: \"os.system('x')\"")),
    ],
)
def test_countdown_parser(text, expected):
    assert countdown.parse_expression(text) == expected


def test_countdown_runs_and_rewards_a_correct_equation(tmp_path):
    first = countdown.make_tasks("train", n=2000, seed=0)[0]
    right = solve(first["numbers"], first["target"])
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps(
            {
                "solver": [f"<answer>{right}</answer>", "I give up"],
                "aggregator": [f"<answer>{right}</answer>"],
            }
        )
    )
    out = tmp_path / "run"
    r = cli(
        "run",
        "workflows/countdown.srpo",
        "--backend",
        "scripted",
        "--model",
        script,
        "--limit",
        "1",
        "--out",
        out,
    )
    assert r.returncode == 0, r.stderr
    episode = json.loads((out / "traces.jsonl").read_text())
    assert episode["prompt_id"] == first["id"] and episode["answer"] == right
    assert (episode["score"], episode["reward"], episode["invalid_actions"]) == (1.0, 0.9, 1)


def test_math_python_runs_programs_as_observations(tmp_path):
    programs = ["<code>print(3/4 - 1/4)</code>", "<code>import sys; sys.exit('boom')</code>"]
    episode = scripted_run(
        "workflows/math_python.srpo",
        {"coder": programs, "answerer": ["FINAL: \\boxed{\\frac{1}{2}}"]},
        tmp_path,
    )
    observations = episode["events"][0]["observations"]
    assert observations == [
        {"tool": "python", "query": "print(3/4 - 1/4)", "result": "0.5"},
        {"tool": "python", "query": "import sys; sys.exit('boom')", "result": "error: boom"},
    ]
    assert episode["cost"]["tool_calls"] == 2 and episode["tool_errors"] == 0
    assert episode["score"] == pytest.approx(0.9)  # right, minus 0.1 for the program that failed


def test_the_python_tool_bounds_runaway_programs():
    tool = user_module("math_python")
    out = tool.run_python(["while True: pass", "x = ' ' * (2 << 30)", "print(sum(range(10)))"], time_limit=1)
    assert out[0] == "error: the program did not finish within 1 s"
    assert out[1] == "error: MemoryError"
    assert out[2] == "45"


skyrl_sql = user_module("skyrl_sql")
SQL_THINK = "<think>count the London rows</think>"


@pytest.mark.parametrize(
    ("solution", "score", "reward"),
    [
        ("SELECT COUNT(*) FROM customers WHERE city = 'London'", 1.0, 1.0),
        ("SELECT COUNT(*) FROM customers", 0.0, 0.0),  # it runs, but its rows are not the gold rows
        ("SELECT COUNT(*) FROM nowhere", 0.0, 0.0),  # it does not run
    ],
)
def test_skyrl_sql_runs_queries_stops_at_each_tag_and_matches_by_execution(tmp_path, solution, score, reward):
    """A turn stops at its first `</sql>` (the made-up observation after it is never seen) or `</solution>`;
    the query's rows come back as an observation; the final query is rewarded by its rows."""
    made_up = "<observation>999</observation><solution>SELECT 999</solution>"
    episode = scripted_run(
        "workflows/skyrl_sql.srpo",
        {
            "analyst": [
                f"{SQL_THINK}<sql>SELECT name FROM customers WHERE city = 'London'</sql>{made_up}",
                f"{SQL_THINK}<solution>{solution}</solution> done",
            ]
        },
        tmp_path,
    )
    first, last = (e["members"][0] for e in episode["events"])
    assert first["text"].endswith("</sql>") and (first["finish"], first["stop_string"]) == ("stop", "</sql>")
    assert last["text"].endswith("</solution>") and last["stop_string"] == "</solution>"
    assert episode["events"][0]["observations"] == [
        {"tool": "sql", "query": "SELECT name FROM customers WHERE city = 'London'", "result": "Ada\nAlan"}
    ]
    assert (
        "999" not in bytes(last["prompt_token_ids"]).decode()
        and "Ada\nAlan" in bytes(last["prompt_token_ids"]).decode()
    )
    assert (episode["answer"], episode["score"], episode["reward"]) == (solution, score, reward)


def test_skyrl_sql_orders_only_where_the_gold_query_does():
    rows = {
        json.loads(line)["id"]: json.loads(line) for line in (ROOT / "workflows/skyrl_sql/tasks.jsonl").open()
    }
    reversed_names = (
        "SELECT name FROM customers WHERE id NOT IN (1, 3, 4) ORDER BY name DESC"  # q8's rows, reordered
    )
    assert skyrl_sql.execution_match("SELECT name FROM customers WHERE id IN (2, 3, 4)", rows["q8"]) == 1.0
    assert skyrl_sql.execution_match(reversed_names, rows["q8"]) == 0.0  # other rows: Grace, Barbara
    assert (
        skyrl_sql.execution_match("SELECT 'pen' UNION SELECT 'lamp'", rows["q7"]) == 0.0
    )  # q7 orders: one row
    assert skyrl_sql.run_sql(
        [
            "SELECT * FROM customers a, customers b, customers c, customers d, customers e, "
            "customers f, customers g, customers h, customers i, customers j"
        ]
    ) == ["error: interrupted"]
