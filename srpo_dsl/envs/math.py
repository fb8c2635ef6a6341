"""Math answers: equivalence by math-verify, after a normalised-string comparison.

`math_equiv(pred, gold)` is true when the two answers have the same canonical string
(`canonical_answer`: no `\\text{}` wrappers, degrees, `\\left`/`\\right`, thin spaces,
dollars, percent signs, spaces or trailing period; `\\dfrac` -> `\\frac`), or when
math-verify finds them equal as written or, when one side has a `\\text{}`-like wrapper or
does not parse, in canonical form (so `\\textbf{(073)}` equals `073` and `104.` equals
`104`). Answers math-verify cannot parse count only by their strings.

Time-boxing: math-verify's own time-out uses `signal.alarm`, which works in the main thread
only; there it is on (`TIMEOUT_S`), elsewhere it is off. So answers whose parsing or
comparison can run away are never handed to math-verify and count only by their strings:
strings longer than `MAX_SYMBOLIC_CHARS`, nested more than `MAX_NESTING` deep, with more
than `MAX_CARETS` `^`, a power tower three high (parsing time is exponential in the height:
`x^{x^{...}}` 12 high took 90 s), or an integral, sum, product, limit, derivative, a
binomial of anything but numbers (`\\binom{100}{n}` took 46 s to compare) or a factorial of
anything but a number, none of which occurs in a final answer; nor are parses holding huge
exponents or factorials, or unevaluated integrals, sums, products, limits and derivatives
(`\\int_0^1 e^{x^{x^x}} dx` took 43 s to compare). Off the main thread, on 2,400 generated
nested answers (integrals, sums, binomials, factorials, towers), the slowest check took 0.5 s;
these guards are the same in every thread.
(The gold answers of MATH500 and AIME 2024 are at most 53 characters, 7 carets, depth 2.)
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

from math_verify import parse, verify
from sympy import (
    Basic,
    Derivative,
    Integer,
    Integral,
    Limit,
    Pow,
    Product,
    Sum,
    factorial,
    preorder_traversal,
)
from sympy.matrices import MatrixBase

TIMEOUT_S = 5  # math-verify's per-call limit, in the main thread
MAX_EXPONENT = 10_000  # larger integer exponents (and factorial arguments) are not evaluated
MAX_SYMBOLIC_CHARS = 200  # longer answers are compared as strings only
MAX_NESTING = 6  # deeper {}, () or [] nesting: strings only
MAX_CARETS = 12  # more `^`: strings only

_WRAPPERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_CANONICAL = [
    (re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°"), ""),
    (re.compile(r"\\(?:left|right|displaystyle)(?![a-zA-Z])"), ""),
    (re.compile(r"\\[!,;: ]|\\?\$|\\?%"), ""),
    (re.compile(r"\\[dt]frac"), r"\\frac"),
    (re.compile(r"\s+"), ""),
    (re.compile(r"\.$"), ""),
]


def canonical_answer(answer: str) -> str:
    """The normalised string form used for the string comparison."""
    answer = _WRAPPERS.sub(r"\1", answer)
    for pattern, repl in _CANONICAL:
        answer = pattern.sub(repl, answer)
    return answer


normalize_math = canonical_answer  # the earlier name, kept for callers


def _unwrap(answer: str) -> str:
    """`$...$` or `\\(...\\)` around a whole answer (OlympiadBench writes them) removed."""
    answer = answer.strip()
    if answer.startswith("\\(") and answer.endswith("\\)"):
        return answer[2:-2].strip()
    return answer.strip("$").strip()


# Never in a final answer of MATH500 / AIME, and slow to parse or compare: integrals, sums,
# products, limits, derivatives, binomials of anything but numbers, the factorial of anything
# but a number, and a superscript chained to another (`a^b^c`, `a^{b}^{c}`).
_RUNAWAY = re.compile(
    r"\\(?:i*int|oint|sum|prod|lim|partial|[dt]?binom|choose)(?![a-zA-Z])|[^\\\d\s]\s*!"
    r"|\^\s*(?:\{[^{}]*\}|\\?[A-Za-z0-9.]+)\s*\^"
)

_NUMERIC_BINOM = re.compile(r"\\[dt]?binom\s*\{\s*\d+\s*\}\s*\{\s*\d+\s*\}")


def _parsable(answer: str) -> bool:
    """False for strings whose parsing may not finish in reasonable time (see the module doc)."""
    if len(answer) > MAX_SYMBOLIC_CHARS or answer.count("^") > MAX_CARETS:
        return False
    if _RUNAWAY.search(_NUMERIC_BINOM.sub("1", answer)):
        return False
    depth, powers, open_powers = 0, [], 0  # brace groups opened by `^{`: height of the power tower
    for i, ch in enumerate(answer):
        if ch in "{([":
            depth += 1
            opened_power = ch == "{" and answer[:i].rstrip().endswith("^")
            powers.append(opened_power)
            open_powers += opened_power
            if depth > MAX_NESTING:
                return False
        elif ch in "})]":
            depth = max(depth - 1, 0)
            open_powers -= powers.pop() if powers else 0
        elif ch == "^" and open_powers >= 2:  # x^{y^{z^w}}: three high
            return False
    return True


_UNEVALUATED = (Integral, Sum, Product, Limit, Derivative)


def _tame(expr: Basic | MatrixBase) -> bool:
    """False for expressions whose evaluation may not finish (e.g. `9^{9^{9}}`, `(10^{100})!`, integrals)."""
    for node in preorder_traversal(expr):
        if isinstance(node, _UNEVALUATED):
            return False
        if isinstance(node, Pow) and node.exp.is_number:
            if not isinstance(node.exp, Integer) and node.exp.has(Pow, factorial):
                return False
            if isinstance(node.exp, Integer) and abs(node.exp) > MAX_EXPONENT:
                return False
        if isinstance(node, factorial) and not (
            isinstance(node.args[0], Integer) and node.args[0] <= MAX_EXPONENT
        ):
            return False
    return True


def _timeout() -> int | None:
    return TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=8192)
def _parsed(answer: str) -> tuple:
    """math-verify's parses of one bare answer; empty when it has no tame sympy form."""
    if not _parsable(answer):
        return ()
    found = tuple(parse(f"${answer}$", parsing_timeout=_timeout()))
    exprs = [x for x in found if isinstance(x, (Basic, MatrixBase))]
    return found if exprs and all(_tame(x) for x in exprs) else ()


def _verify(pred: str, gold: str) -> bool:
    p, g = _parsed(pred), _parsed(gold)
    return bool(p and g) and verify(list(g), list(p), timeout_seconds=_timeout())


def math_equiv(pred: str | None, gold: str) -> bool:
    """True when `pred` and `gold` are the same mathematical answer; None (no answer) is never."""
    if pred is None:
        return False
    p, g = _unwrap(pred), _unwrap(gold)
    cp, cg = canonical_answer(p), canonical_answer(g)
    if not cp:
        return False
    if cp == cg:
        return True
    if _verify(p, g):
        return True
    retry = _WRAPPERS.search(p) or _WRAPPERS.search(g) or not (_parsed(p) and _parsed(g))
    return bool(retry) and _verify(cp, cg)
