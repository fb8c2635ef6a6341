"""The SQL tool and the execution-match reward of `skyrl_sql.srpo`, written as a user of srpo-dsl writes them.

- `run_sql(queries, database)`: the tool. Each query runs on a fresh in-memory copy of the database (built
  from its `.sql` script beside this file, so no query can change what the next one sees), aborted after
  `MAX_STEPS` virtual-machine steps; the observation is its first rows, or `error: ...`.
- `execution_match(answer, row)`: SkyRL's text-to-SQL reward: 1.0 when the final query returns the gold
  query's rows (in order when the gold query orders them, as a multiset otherwise), else 0.0. A query that
  fails, or an answer that is no query, scores 0.0; a turn that breaks the format is the workflow's
  invalid action (its penalty).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

HERE = Path(__file__).with_name("skyrl_sql")
MAX_STEPS = 1_000_000  # SQLite VM steps before a query is aborted (a runaway cross join)
MAX_ROWS = 20  # rows an observation shows


def _database(name: str) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.executescript((HERE / f"{name}.sql").read_text(encoding="utf-8"))
    steps = iter(range(MAX_STEPS // 1000))
    db.set_progress_handler(lambda: next(steps, None) is None, 1000)  # non-zero aborts the query
    return db


def _rows(name: str, query: str) -> list[tuple]:
    with _database(name) as db:
        return db.execute(query).fetchall()


def _shown(name: str, query: str) -> str:
    try:
        rows = _rows(name, query)
    except sqlite3.Error as exc:
        return f"error: {exc}"
    lines = [", ".join(map(str, r)) for r in rows[:MAX_ROWS]]
    more = [f"... {len(rows) - MAX_ROWS} more rows"] if len(rows) > MAX_ROWS else []
    return "\n".join(lines + more) or "(no rows)"


def run_sql(queries: list[str], database: str = "shop") -> list[str]:
    return [_shown(database, q) for q in queries]


def execution_match(answer: object, row: dict) -> float:
    if not isinstance(answer, str) or not answer.strip():
        return 0.0
    try:
        got, gold = _rows(row["db"], answer), _rows(row["db"], row["answer"])
    except sqlite3.Error:
        return 0.0
    if "order by" in row["answer"].lower():
        return float(got == gold)
    return float(Counter(got) == Counter(gold))
