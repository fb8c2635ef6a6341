"""The run's time: `--budget-s` and what each case is expected to take, so that a case that cannot finish
is skipped (its row says so) and one still running when the budget ends is stopped; SIGTERM or SIGINT
(a `timeout` around the bench, Ctrl-C) stops the run the same way."""

from __future__ import annotations

import signal
import time
from typing import Any

from gpubench.shapes import parameters

REFERENCE = "0.6b"  # the shape the estimates are for: Qwen3-0.6B
ROLLOUT_WORK = 512 * 128  # the estimates' rollout shape: rows x new tokens
TRAIN_WORK = 16 * 8 * 128  # and training shape: prompts x group x new tokens
# Seconds on one H200 at REFERENCE, bf16. The rollout's: (first call, one timed call), issue 46's table
# (November 28); continuous batching was never reached, its figure is a guess. The rest are guesses
# (unmeasured since the code of November 22): (start, one step) of `srpo-dsl train` at the `static`
# decode loop, the start being the process, the model, DeepSpeed and the step-0 evaluation.
ROLLOUT_S = {"hf_compiled": (46.0, 3.7), "generate_static": (84.2, 2.4), "generate": (12.8, 4.9),
             "hf_static": (12.4, 10.5), "hf_dynamic": (34.4, 10.5), "continuous_batching": (150.0, 5.0)}  # fmt: skip
ROLLOUT_START_S = 15.0  # the rollout process: imports, the model onto the GPU, a warm-up forward (a guess)
BUILD_S = 20.0  # a random model's build and save (a guess), scaled by size
TRAIN_S = {"update": (40.0, 3.5), "zero3": (50.0, 7.0), "team": (40.0, 25.0), "trl": (40.0, 8.0)}  # guesses


def scale(size: str, work: float, reference: float) -> float:
    """How much longer than at REFERENCE and the `reference` work: parameters x work (rows x tokens)."""
    return parameters(size) / parameters(REFERENCE) * work / reference


def rollout_s(generator: str, size: str, rows: int, tokens: int, repeats: int) -> float:
    first, timed = ROLLOUT_S[generator]
    return first + repeats * timed * scale(size, rows * tokens, ROLLOUT_WORK)


def train_s(kind: str, size: str, rows: int, tokens: int, steps: int) -> float:
    """`kind` one of TRAIN_S; rows = prompts x group."""
    start, step = TRAIN_S[kind]
    return start + steps * step * scale(size, rows * tokens, TRAIN_WORK)


def build_s(size: str) -> float:
    return BUILD_S * parameters(size) / parameters(REFERENCE)


class Clock:
    """The budget's end, and whether the run was told to stop (`watch_signals`). `device` cpu: the
    estimates (an H200's) are not used, a case starts while any time is left."""

    def __init__(self, budget_s: float, device: str):
        self.end = time.monotonic() + budget_s
        self.estimates = device == "cuda"
        self.signal: int | None = None

    def watch_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)

    def _stop(self, signum: int, _frame: Any) -> None:
        self.signal = signum

    def left(self) -> float:
        return self.end - time.monotonic()

    def stop_reason(self) -> str | None:
        """Why a running case must stop now, or None."""
        if self.signal is not None:
            return f"the bench got {signal.Signals(self.signal).name}"
        return "the --budget-s time ran out" if self.left() <= 0 else None

    def gate(self, estimate_s: float) -> str | None:
        """Why a case expected to take `estimate_s` must not start, or None."""
        if (why := self.stop_reason()) is not None:
            return why
        if self.estimates and estimate_s > self.left():
            return f"needs about {estimate_s:.0f} s, {self.left():.0f} s of --budget-s left"
        return None

    def deadline(self) -> float:
        """The budget's end as wall-clock time (for a child process's own checks)."""
        return time.time() + self.left()

    def exit_code(self) -> int:
        return 128 + self.signal if self.signal is not None else 0
