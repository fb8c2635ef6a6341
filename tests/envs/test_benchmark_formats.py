"""The six math benchmarks of the paper's table, as a user downloads them: each file loads as `math`
tasks (question, gold answers, ids), a right boxed answer is accepted and a wrong one is not.

MATH500 and AIME24 are the real files where the machine has them (tests/envs/test_envs.py); AIME25, AMC23, Minerva
and OlympiadBench are small files in their published layouts (tests/data/benchmarks, written here,
three rows each): docs/training.md "Reproducing the paper" lists the fields.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from srpo_dsl.envs.data import load_tasks
from srpo_dsl.envs.math import math_equiv
from srpo_dsl.runtime.parsers import last_boxed

FORMATS = Path(__file__).parents[1] / "data" / "benchmarks"

# file -> (ids, gold answers as loaded, a right answer per row, a wrong one per row)
EXPECTED = {
    "aime25": (["0", "1", "2"], [["49"], ["301"], ["376"]], ["49", "301", "376"], ["50", "300", "377"]),
    "amc23": (  # `answer` is a float in the published file: 17.0 is read as "17"
        ["0", "1", "2"],
        [["17"], ["52"], ["7"]],
        ["17", "52", "7"],
        ["17.5", "48", "-7"],
    ),
    "minerva": (  # no id field: FILE-ROW
        ["minerva-0", "minerva-1", "minerva-2"],
        [["4"], ["1"], ["3"]],
        ["4", "1.0", "3"],
        ["0.25", "2", "1/8"],
    ),
    "olympiadbench": (  # `final_answer` is a list; a multiple answer is one comma-separated string in it
        ["2231", "2232", "2233"],
        [["16"], ["$\\frac{1}{6}$"], ["$3,-3$"]],
        ["16", "\\frac{1}{6}", "-3, 3"],
        ["4", "\\frac{1}{36}", "3"],
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_benchmark_layout_loads_as_math_tasks(name):
    ids, golds, right, wrong = EXPECTED[name]
    rows = load_tasks(FORMATS / f"{name}.jsonl", kind="math")
    assert [r["id"] for r in rows] == ids
    assert [r["answers"] for r in rows] == golds
    assert all(r["answer"] == r["answers"][0] and r["question"].strip() for r in rows)
    for row, good, bad in zip(rows, right, wrong):
        reply = f"So the answer is \\boxed{{{good}}}."
        assert any(math_equiv(last_boxed(reply), g) for g in row["answers"]), (name, good)
        assert not any(math_equiv(bad, g) for g in row["answers"]), (name, bad)


def test_a_limit_reads_the_first_rows_only():
    rows = load_tasks(FORMATS / "olympiadbench.jsonl", kind="math", limit=2)
    assert [r["id"] for r in rows] == ["2231", "2232"] and rows[0]["subfield"] == "Algebra"
