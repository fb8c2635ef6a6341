"""The toy task of the quickstart: add two integers, answer in `\\boxed{}`.

About one operand pair in ten is *held out* forever (a fixed hash): the embedded model's
warm-up never sees those pairs, training draws from the others, evaluation from them.
"""

from __future__ import annotations

import random
import zlib


def is_heldout(a: int, b: int) -> bool:
    """The fixed held-out pairs: about one in ten."""
    return zlib.crc32(f"{a}+{b}".encode()) % 10 == 0


def make_arith_tasks(n: int, seed: int = 0, max_operand: int = 99, *, heldout: bool = False) -> list[dict]:
    """`n` additions `a+b` with a, b in 0..max_operand from one side of the split; deterministic."""
    rng = random.Random(seed)
    tasks: list[dict] = []
    pairs = [
        (a, b) for a in range(max_operand + 1) for b in range(max_operand + 1) if is_heldout(a, b) == heldout
    ]
    if not pairs:
        raise ValueError(f"no {'held-out' if heldout else 'training'} pairs with max_operand={max_operand}")
    for i in range(n):
        a, b = pairs[rng.randrange(len(pairs))]
        tasks.append(
            {
                "id": f"arith-{'eval' if heldout else 'train'}-{seed}-{i}",
                "question": f"{a}+{b}",
                "answer": str(a + b),
                "answers": [str(a + b)],
            }
        )
    return tasks
