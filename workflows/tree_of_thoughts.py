"""Tree-of-Thoughts (Yao et al., 2023) on the Game of 24, written as a user of srpo-dsl writes an environment.

A thought is one step of arithmetic: two of the numbers left become one (`11 - 7 = 4`), so four
numbers are solved in three steps, when the one number left is the target. `tree_of_thoughts.srpo`
steps the environment `search(outputs, row, state, widest, step_credit)`, which keeps the search in
`state`:

- its first step (`step tree`, before anyone acts) shows the puzzle and opens the root thought;
- each later step reads the proposers' steps (`<thought>11 - 7 = 4</thought>`), applies each valid one to
  the thought they all extended, and evaluates every new thought exactly: the number of ways the
  numbers it leaves can still make the target (an exhaustive search: three numbers at most). It
  keeps the best: a solution (word `solved`), else the new thought with the most ways (`expand` from
  there), else the same thought again (`expand`, with each proposal's error shown);
- it chooses the fan-out, how many proposers extend the next thought (`parallel proposer by tree`):
  `min(widest, numbers left - 1)` for a new thought (fewer numbers, fewer pairs to combine: 3, 2,
  then 1 proposer on four numbers), and all `widest` again after a round that found no way forward.

Rewards (`reward tree`): the step that solves the puzzle gives 1.0, every other step 0.0, so the
score is whether the puzzle was solved. Each step also credits every proposer of its round
(`proposer#R@N`): the step's reward, plus `step_credit` when that proposer's own step was valid and
can still make the target (docs/objective.md, "Credit per member and per round").
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import cache
from itertools import combinations

_STEP = re.compile(r"\s*(\d+(?:/\d+)?)\s*([-+*/])\s*(\d+(?:/\d+)?)\s*=\s*(-?\d+(?:/\d+)?)\s*")
_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b else None,
}


def _text(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


@cache
def ways(left: tuple[Fraction, ...], target: Fraction) -> int:
    """How many sequences of steps turn the numbers `left` (sorted) into `target` alone."""
    if len(left) == 1:
        return int(left[0] == target)
    total = 0
    for i, j in combinations(range(len(left)), 2):
        rest = tuple(x for k, x in enumerate(left) if k not in (i, j))
        a, b = left[i], left[j]
        results = [a + b, a * b, a - b, b - a] + [x / y for x, y in ((a, b), (b, a)) if y]
        total += sum(ways(tuple(sorted((*rest, r))), target) for r in results)
    return total


def apply(left: tuple[Fraction, ...], step: str) -> tuple[tuple[Fraction, ...] | None, str]:
    """(the numbers left after `step`, "") or (None, why the step is not one of `left`)."""
    found = _STEP.fullmatch(step)
    if found is None:
        return None, f"`{step.strip()}` is not `A op B = C`"
    a, op, b, c = Fraction(found[1]), found[2], Fraction(found[3]), Fraction(found[4])
    rest = list(left)
    for x in (a, b):
        if x not in rest:
            return None, f"`{step.strip()}`: {_text(x)} is not among the numbers left"
        rest.remove(x)
    value = _OPS[op](a, b)
    if value != c:
        return None, f"`{step.strip()}`: {_text(a)} {op} {_text(b)} is not {_text(c)}"
    return tuple(sorted((*rest, value))), ""


def _show(left: tuple[Fraction, ...], steps: list[str]) -> str:
    done = "; ".join(steps) if steps else "none yet"
    return f"Numbers left: {' '.join(_text(x) for x in left)}\nSteps so far: {done}"


def _fan_out(left: tuple[Fraction, ...], widest: int, stuck: bool) -> list[int]:
    """The proposers (replicas 1..k) that extend the next thought."""
    k = widest if stuck else min(widest, len(left) - 1)
    return list(range(1, max(k, 1) + 1))


def _evaluate(state: dict, proposals: list[dict], target: Fraction) -> tuple[dict[int, bool], list[str]]:
    """Apply each proposal to the current thought; move to the best new thought, if any can still make
    `target`. Returns each proposer's verdict (its step can still make the target) and the notes shown."""
    best, good, notes = None, {}, []
    for o in proposals:
        child, why = apply(state["left"], o["value"]) if o["valid"] else (None, "no <thought>...</thought>")
        value = ways(child, target) if child is not None else 0
        good[o["replica"]] = value > 0
        verdict = why or f"{'can' if value else 'cannot'} make {_text(target)}"
        notes.append(f"proposer {o['replica']}: {verdict}")
        if value and (best is None or value > best[0]):
            best = (value, child, o["value"].strip())
    if best is not None:
        state["left"], state["steps"] = best[1], [*state["steps"], best[2]]
    return good, notes


def search(outputs: dict, row: dict, state: dict, widest: int = 3, step_credit: float = 0.5):
    """One step of the search: (observations, word, reward, {"proposer": the replicas acting next})."""
    target = Fraction(row["target"])
    if not outputs:  # `step tree`, before anyone acts: the puzzle, and the first fan-out
        state.update(left=tuple(sorted(Fraction(x) for x in row["numbers"])), steps=[], rounds=0)
        seen = f"{row['question']}\n{_show(state['left'], [])}"
        return {"proposer": seen}, "expand", 0.0, {"proposer": _fan_out(state["left"], widest, False)}
    state["rounds"] += 1
    moved = len(state["steps"])
    good, notes = _evaluate(state, outputs["proposer"], target)
    solved = state["left"] == (target,)
    reward = 1.0 if solved else 0.0
    credit = {f"proposer#{r}@{state['rounds']}": reward + step_credit * ok for r, ok in good.items()}
    shown = _show(state["left"], state["steps"])
    seen = f"Solved. {shown}" if solved else f"{shown}\nLast round: " + "; ".join(notes)
    fan_out = [] if solved else _fan_out(state["left"], widest, len(state["steps"]) == moved)
    word = "solved" if solved else "expand"
    return {"proposer": seen}, word, {"tree": reward, **credit}, {"proposer": fan_out}
