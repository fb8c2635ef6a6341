"""The calculator of `quickstart_tools.srpo`: one observation per query, in order.

`calculate` (srpo_dsl.envs.arith) parses each query with `ast` and computes only `a+b`,
`a-b` or `a*b` of two integers; anything else is an `error: ...` observation, which the
agent reads in its next prompt. Returning errors as text (not raising) keeps one bad query
from spoiling the others of a batch.
"""

from __future__ import annotations

from srpo_dsl.envs.arith import calculate


def calc(queries: list[str]) -> list[str]:
    return [calculate(q) for q in queries]
