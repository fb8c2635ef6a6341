"""How good a model is as the quickstart team and as the tool agent: the tiny model's report.

Both run whole episodes (`episodes.py`) through a backend, one batch per event or turn, on the
questions they are given (the warm-up's report: held-out ones, never seen in training).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from srpo_dsl.backends.base import Backend, GenRequest
from srpo_dsl.models.episodes import (
    MAX_TOKENS,
    SOLVERS,
    TOOL,
    TOOL_MAX_TOKENS,
    TOOL_TURNS,
    VERDICTS,
    ToolRun,
    commit_team_event,
    parse_team_verdict,
    start,
    team_prompt,
    templates_dir,
)
from srpo_dsl.runtime.parsers import Parsed, parse_boxed, parse_final_boxed
from srpo_dsl.runtime.prompts import PromptRenderer


@dataclass(frozen=True)
class TeamScore:
    """Fractions of questions: the aggregator's FINAL answer is right; a solver is right; the verdict fits."""

    team: float
    solver: float
    verifier: float


def evaluate_team(backend: Backend, tasks: list[dict], *, temperature: float, seed: int = 0) -> TeamScore:
    """Run the quickstart team on `tasks`: both solvers, then the verifier, then the aggregator."""
    renderer = PromptRenderer([templates_dir()])
    episodes = [start(t) for t in tasks]

    def act(role: str, replicas: int, step_seed: int, parse: Callable[[str], Parsed]) -> list[str]:
        """Every episode's event of `role`, generated in one batch and committed; the texts, in order."""
        requests = [
            GenRequest(team_prompt(renderer, ep, role, r), MAX_TOKENS[role], temperature, role=role)
            for ep in episodes
            for r in range(1, replicas + 1)
        ]
        texts = [r.text for r in backend.generate(requests, seed=step_seed)]
        for i, ep in enumerate(episodes):
            commit_team_event(ep, role, texts[i * replicas : (i + 1) * replicas], parse)
        return texts

    act("solver", SOLVERS, seed, parse_boxed)
    act("verifier", 1, seed + 1, parse_team_verdict)
    finals = act("aggregator", 1, seed + 2, parse_final_boxed)
    team_right = solver_right = verdict_right = 0
    for task, ep, final in zip(tasks, episodes, finals):
        solvers, verifier = ep.team_context[:SOLVERS], ep.team_context[SOLVERS]
        solver_right += sum(m["value"] == task["answer"] for m in solvers)
        both = all(m["value"] == task["answer"] for m in solvers)
        verdict_right += verifier["value"] == (VERDICTS[0] if both else VERDICTS[1])
        team_right += parse_final_boxed(final).value == task["answer"]
    n = len(tasks)
    return TeamScore(team_right / n, solver_right / (SOLVERS * n), verdict_right / n)


@dataclass(frozen=True)
class ToolScore:
    """Fractions of questions: the tool agent's final answer is right; its first turn asks the calculator."""

    accuracy: float
    call_rate: float


def evaluate_tools(backend: Backend, tasks: list[dict], *, temperature: float, seed: int = 0) -> ToolScore:
    """Run the tool agent on graded `tasks`: every unfinished episode's next turn in one batch per round."""
    renderer = PromptRenderer([templates_dir()])
    runs = [ToolRun(start(t)) for t in tasks]
    for round_ in range(TOOL_TURNS + 1):
        live = [r for r in runs if not r.done]
        requests = [GenRequest(r.prompt(renderer), TOOL_MAX_TOKENS, temperature, role="solver") for r in live]
        for run, out in zip(live, backend.generate(requests, seed=seed + round_) if live else []):
            run.commit(out.text)
    right = sum(r.answer == t["answer"] for r, t in zip(runs, tasks))
    calls = sum(r.first_action == TOOL for r in runs)
    return ToolScore(right / len(tasks), calls / len(tasks))
