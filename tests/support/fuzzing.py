"""A seeded mutation fuzzer: mutated workflows and corrupted run folders, each case reproducible from
(seed, index) and shrunk to its fewest mutations when it fails.

`SRPO_DSL_FUZZ_CASES=N` runs N cases per target in place of the small default, `SRPO_DSL_FUZZ_SEED=S`
another seed (docs/benchmarks.md, "Fuzzing")."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from srpo_dsl.lang.tooling.format import tokens_of

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "workflows").glob("*.srpo"))
SEED = int(os.environ.get("SRPO_DSL_FUZZ_SEED", "48"))
DEEP = "repeat at most 2 {\n" * 200 + "}\n" * 200
HUGE = ["1e400", "99999999999999999999", "-1e400", "1" * 400]
SPICE = [b"\x00", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\r", b"\t", "\u2028".encode(), b"\\", b'"']


def case_count(default: int) -> int:
    return int(os.environ.get("SRPO_DSL_FUZZ_CASES", default))


@dataclass
class Case:
    """One fuzz case: a base file and its mutations, each op `(kind, a, b)` with `a`, `b` random ints."""

    seed: int
    index: int
    base: Path
    ops: list[tuple[str, int, int]] = field(default_factory=list)

    def with_ops(self, ops: list[tuple[str, int, int]]) -> Case:
        return Case(self.seed, self.index, self.base, ops)

    def describe(self, data: bytes) -> str:
        shown = data if len(data) <= 600 else data[:300] + b"..." + data[-300:]
        return (
            f"fuzz case: SRPO_DSL_FUZZ_SEED={self.seed} case {self.index}, base {self.base.name}, "
            f"ops {self.ops}\nreproduction ({len(data)} bytes): {shown!r}"
        )


def draw_ops(rng: random.Random, kinds: list[str], most: int = 4) -> list[tuple[str, int, int]]:
    return [
        (rng.choice(kinds), rng.randrange(1 << 30), rng.randrange(1 << 30))
        for _ in range(rng.randint(1, most))
    ]


def cases(bases: list[Path], kinds: list[str], default: int) -> list[Case]:
    """`case_count(default)` cases, case i drawn from its own generator (seed, i): reproducible alone."""
    out = []
    for i in range(case_count(default)):
        rng = random.Random(f"{SEED}:{i}")
        out.append(Case(SEED, i, rng.choice(bases), draw_ops(rng, kinds)))
    return out


def shrink(case: Case, fails: Callable[[Case], bool]) -> Case:
    """The case with each op that its failure does not need removed (greedy, one op at a time)."""
    ops = list(case.ops)
    i = 0
    while i < len(ops):
        fewer = case.with_ops(ops[:i] + ops[i + 1 :])
        if fewer.ops and fails(fewer):
            ops = fewer.ops
        else:
            i += 1
    return case.with_ops(ops)


# --- workflows --------------------------------------------------------------------------------

TOKEN_OPS = ["delete", "duplicate", "swap"]
BYTE_OPS = ["bytes", "identifier", "nesting", "number", "spice"]
WORKFLOW_OPS = TOKEN_OPS + BYTE_OPS


def _pieces(text: str) -> list[str]:
    """`text` cut at its tokens' edges: [gap, token, gap, token, ..., gap]; joined, it is `text`."""
    pieces, at = [], 0
    for tok in tokens_of(text):
        pieces += [text[at : tok.start_pos], text[tok.start_pos : tok.end_pos]]
        at = tok.end_pos
    return [*pieces, text[at:]]


def _token_op(pieces: list[str], kind: str, a: int, b: int) -> None:
    n = len(pieces) // 2
    if not n:
        return
    i, j = 2 * (a % n) + 1, 2 * (b % n) + 1
    if kind == "delete":
        pieces[i] = ""
    elif kind == "duplicate":
        pieces[i] = pieces[i] + " " + pieces[i]
    else:
        pieces[i], pieces[j] = pieces[j], pieces[i]


def _byte_op(data: bytes, kind: str, a: int, b: int) -> bytes:
    at = a % (len(data) + 1)
    if kind == "nesting":  # at a line's start, so the loops open where a step may stand
        at = data.rfind(b"\n", 0, at) + 1
    rng = random.Random(b)
    insert = {
        "bytes": lambda: rng.randbytes(rng.randint(1, 16)),
        "identifier": lambda: b"x" * rng.choice([300, 5000, 100000]),
        "nesting": lambda: DEEP.encode(),
        "number": lambda: rng.choice(HUGE).encode(),
        "spice": lambda: rng.choice(SPICE),
    }[kind]()
    return data[:at] + insert + data[at:]


def mutate_workflow(case: Case) -> bytes:
    """The base workflow with the case's token ops (on its lexer's tokens), then its byte ops."""
    pieces = _pieces(case.base.read_text(encoding="utf-8"))
    for kind, a, b in case.ops:
        if kind in TOKEN_OPS:
            _token_op(pieces, kind, a, b)
    data = "".join(pieces).encode()
    for kind, a, b in case.ops:
        if kind in BYTE_OPS:
            data = _byte_op(data, kind, a, b)
    return data


# --- run folders ------------------------------------------------------------------------------

RUN = ROOT / "tests" / "data" / "old_run"
RUN_FILES = [RUN / "traces.jsonl", RUN / "metrics.jsonl", RUN / "eval.jsonl"]
RUN_OPS = ["truncate", "bytes", "deep", "number", "type", "spice", "join"]
WRONG = ["null", '"x"', "[]", "{}", "true", "-1", "1e400", "NaN"]


def _values(line: bytes) -> list[tuple[int, int]]:
    """The spans of the values after `":` in one JSON line (numbers, strings, literals; rough)."""
    out, at = [], 0
    while (at := line.find(b'":', at)) >= 0:
        start = at + 2 + (line[at + 2 : at + 3] == b" ")
        end = start
        while end < len(line) and line[end : end + 1] not in b",}]":
            end += 1
        out.append((start, end))
        at = end
    return out


def _run_op(lines: list[bytes], kind: str, a: int, b: int) -> None:
    i = a % len(lines)
    line, rng = lines[i], random.Random(b)
    spans = _values(line) or [(0, len(line))]
    start, end = spans[b % len(spans)]
    if kind == "truncate":
        lines[i] = line[: b % (len(line) + 1)]
    elif kind == "bytes":
        at = b % (len(line) + 1)
        lines[i] = line[:at] + rng.randbytes(rng.randint(1, 8)) + line[at:]
    elif kind == "deep":
        depth = rng.choice([100000, 2000, 990, 500])
        lines[i] = (
            b"[" * depth + b"]" * depth
            if rng.random() < 0.5
            else line[:start] + b"[" * depth + b"]" * depth + line[end:]
        )
    elif kind in ("number", "type"):
        lines[i] = line[:start] + rng.choice(HUGE if kind == "number" else WRONG).encode() + line[end:]
    elif kind == "spice":
        at = b % (len(line) + 1)
        lines[i] = line[:at] + rng.choice(SPICE) + line[at:]
    elif i + 1 < len(lines):  # join: a line runs into the next one (its newline lost)
        lines[i : i + 2] = [line + lines[i + 1]]


def corrupt_run(case: Case) -> bytes:
    """The base run file's bytes with the case's corruptions, line by line."""
    lines = case.base.read_bytes().split(b"\n")
    for kind, a, b in case.ops:
        _run_op(lines, kind, a, b)
    return b"\n".join(lines)
