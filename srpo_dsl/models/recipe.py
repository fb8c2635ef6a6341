"""The embedded model's name, the recipe it is built with and the report of its build: what `tiny.py` and
the build's modules (`warmup.py`, `transcripts.py`) share, below all of them."""

from __future__ import annotations

from dataclasses import dataclass

TINY_MODEL_ID = "builtin:tiny"


@dataclass(frozen=True)
class Recipe:
    """The model's shape, the warm-up schedule and the size of the held-out report."""

    hidden: int = 128
    layers: int = 2
    intermediate: int = 256
    episodes: int = 16_000  # synthetic team episodes (4 transcripts each)
    tool_episodes: int = 24_000  # synthetic tool-agent episodes (1-4 transcripts each)
    steps: int = 1_200
    batch: int = 128
    lr: float = 2e-3
    eval_questions: int = 256


RECIPE = Recipe()  # the shipped model's


@dataclass(frozen=True)
class WarmupReport:
    """What the warm-up did and how good the result is on held-out questions."""

    seed: int
    parameters: int
    steps: int
    batch: int
    final_loss: float
    sampled_team_accuracy: float  # temperature 1
    greedy_team_accuracy: float
    sampled_solver_accuracy: float
    greedy_solver_accuracy: float
    sampled_verifier_accuracy: float  # approve iff both solvers are right
    greedy_verifier_accuracy: float
    sampled_tool_accuracy: float  # the tool agent's final answer is right (graded held-out questions)
    greedy_tool_accuracy: float
    sampled_tool_call_rate: float  # the tool agent's first turn asks the calculator
    greedy_tool_call_rate: float
