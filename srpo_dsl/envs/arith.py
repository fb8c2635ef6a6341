"""The toy tasks of the quickstarts: integer arithmetic, answered in `\\boxed{}` or with a calculator.

About one question in ten is *held out* forever (a fixed hash of its text): the embedded
model's warm-up never sees those questions, training draws from the others, evaluation
from them.

Two mixes (the `arith` task's `mix` option):
- `sums` (the quickstart's): `a+b` with a, b in 0..max_operand; rows have no `difficulty`.
- `graded` (the tool quickstart's): one third each of `easy` (one-digit sums, `3+5`),
  `medium` (two-digit sums, `47+38`) and `hard` (two-digit products, `47*86`); every row
  has a `difficulty` field. Two-digit operands run 10..max_operand.
"""

from __future__ import annotations

import ast
import operator
import random
import zlib

from srpo_dsl.lang.checks.schema import ARITH_MIXES as MIXES

LEVELS = ("easy", "medium", "hard")  # the graded mix, in order of difficulty
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
MAX_DIGITS = 6  # per operand of a calculation: nothing huge is computed


def is_heldout(a: int, b: int, op: str = "+") -> bool:
    """The fixed held-out questions `a{op}b`: about one in ten."""
    return zlib.crc32(f"{a}{op}{b}".encode()) % 10 == 0


def _questions(level: str, max_operand: int) -> list[tuple[int, str, int]]:
    """(a, op, b) of one difficulty level (`sums`: every pair up to max_operand)."""
    one, two = range(10), range(10, max_operand + 1)
    grid = {
        "sums": (range(max_operand + 1), "+"),
        "easy": (one, "+"),
        "medium": (two, "+"),
        "hard": (two, "*"),
    }
    operands, op = grid[level]
    return [(a, op, b) for a in operands for b in operands]


def _row(a: int, op: str, b: int, ident: str) -> dict:
    value = str(a + b if op == "+" else a * b)
    return {"id": ident, "question": f"{a}{op}{b}", "answer": value, "answers": [value]}


def make_arith_tasks(
    n: int, seed: int = 0, max_operand: int = 99, *, heldout: bool = False, mix: str = "sums"
) -> list[dict]:
    """`n` questions of `mix` from one side of the split; deterministic. The graded mix cycles
    easy, medium, hard."""
    if mix not in MIXES:
        raise ValueError(f"unknown arith mix `{mix}` (known: {', '.join(MIXES)})")
    if mix == "graded" and max_operand < 10:
        raise ValueError(f"the graded mix needs max_operand >= 10 (two-digit operands), got {max_operand}")
    rng = random.Random(seed)
    split = "eval" if heldout else "train"
    levels = ("sums",) if mix == "sums" else LEVELS
    pools = {
        lv: [q for q in _questions(lv, max_operand) if is_heldout(*q[::2], q[1]) == heldout] for lv in levels
    }
    for level, pool in pools.items():
        if not pool:
            side = "held-out" if heldout else "training"
            raise ValueError(f"no {side} {level} questions with max_operand={max_operand}")
    tasks: list[dict] = []
    for i in range(n):
        level = levels[i % len(levels)]
        pool = pools[level]
        a, op, b = pool[rng.randrange(len(pool))]
        ident = f"arith-{split}-{seed}-{i}" if mix == "sums" else f"arith-{mix}-{split}-{seed}-{i}"
        row = _row(a, op, b, ident)
        tasks.append(row if mix == "sums" else {**row, "difficulty": level})
    return tasks


def _operand(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int and len(str(node.value)) <= MAX_DIGITS:
        return node.value
    raise ValueError(f"operands: integers of at most {MAX_DIGITS} digits")


def calculate(query: str) -> str:
    """The calculator of the tool quickstart: `a+b`, `a-b` or `a*b` of two integers, or `error: ...`.
    Nothing is `eval`-ed: the query is parsed with `ast` and only that one operation is computed."""
    try:
        node = ast.parse(query.strip(), mode="eval").body
        if not isinstance(node, ast.BinOp) or type(node.op) not in OPERATORS:
            raise ValueError("not a+b, a-b or a*b")
        return str(OPERATORS[type(node.op)](_operand(node.left), _operand(node.right)))
    except SyntaxError:
        return "error: not a+b, a-b or a*b"
    except ValueError as err:
        return f"error: {err}"
