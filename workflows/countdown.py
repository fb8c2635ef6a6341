"""Countdown (the TinyZero task), written as a user of srpo-dsl writes a task of their own.

`countdown.srpo` names three functions of this file:

- `make_tasks(split, ...)`: the task loader; rows {id, numbers, target, question}. Every
  target is reachable: it is the value of a random expression over the row's numbers.
- `parse_expression(text)`: the aggregator's output contract; (valid, expression).
- `reward(answer, row)`: 1.0 when the expression uses only the row's numbers (each at most
  once) and equals the target, else 0.0.

Expressions are evaluated with `ast` over exact fractions: no `eval`, no floats.
"""

from __future__ import annotations

import ast
import operator
import random
import re
from collections import Counter
from fractions import Fraction

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ALLOWED = re.compile(r"[0-9+\-*/() ]+")


def _random_target(rng: random.Random, numbers: list[int]) -> int | None:
    """The value of a random left-to-right expression over `numbers`, if it is a positive integer."""
    value = Fraction(numbers[0])
    for x in numbers[1:]:
        op = rng.choice("+-*/")
        if op == "/" and x == 0:
            return None
        value = _OPS[{"+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div}[op]](value, Fraction(x))
    return int(value) if value.denominator == 1 and 0 < value <= 999 else None


def make_tasks(split: str, n: int = 1000, eval_n: int = 100, seed: int = 0, count: int = 4) -> list[dict]:
    """`n` training rows or `eval_n` held-out rows of `count` numbers in 1..99; deterministic per split."""
    rng = random.Random(f"countdown/{split}/{seed}")
    rows = []
    while len(rows) < (eval_n if split == "eval" else n):
        numbers = [rng.randint(1, 99) for _ in range(count)]
        target = _random_target(rng, rng.sample(numbers, len(numbers)))
        if target is None:
            continue
        rows.append(
            {
                "id": f"countdown-{split}-{seed}-{len(rows)}",
                "numbers": numbers,
                "target": target,
                "question": f"Using the numbers {numbers}, create an equation that equals {target}.",
            }
        )
    return rows


def parse_expression(text: str) -> tuple[bool, str]:
    """Exactly one <answer>...</answer> holding only numbers, + - * / and parentheses."""
    found = _ANSWER.findall(text)
    if len(found) != 1:
        return False, f"expected exactly one <answer>...</answer>, found {len(found)}"
    expression = found[0].strip()
    if not expression or not _ALLOWED.fullmatch(expression):
        return False, f"not an arithmetic expression: {expression[:40]!r}"
    return True, expression


def _evaluate(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, used)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left, used), _evaluate(node.right, used))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, used)
    raise ValueError(f"unsupported syntax: {type(node).__name__}")


def reward(answer: str | None, row: dict) -> float:
    """1.0 for a correct equation over the row's numbers (each used at most once), else 0.0."""
    if answer is None:
        return 0.0
    used: list[int] = []
    try:
        value = _evaluate(ast.parse(answer, mode="eval"), used)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return 0.0
    if Counter(used) - Counter(row["numbers"]):  # a number not given, or used too often
        return 0.0
    return float(value == row["target"])
