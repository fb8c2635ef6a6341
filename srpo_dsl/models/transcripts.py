"""The episode simulator: synthetic (prompt, response) transcripts of the quickstart team and the
tool agent, the warm-up's training data.

Episodes are stepped as the executor steps them (`episodes.py`). The transcripts are deliberately
imperfect, so RL has room: solvers are right 60% of the time (else off by a small amount;
sometimes malformed), the verifier approves when both solvers are right (with noise), and the
aggregator copies a candidate, often but not always the right one. The tool agent (graded
questions, `mix = "graded"`) asks the calculator on half of its first turns whatever the
difficulty, else answers directly (right on 90% of one-digit sums, 50% of two-digit sums, 2% of
products; else a near miss), answers with the result it got (95%; one call in ten asks a
slightly wrong question, so the answer must be read from the result, not recomputed), and is
sometimes malformed. Held-out questions (`srpo_dsl.envs.arith.is_heldout`) are never drawn.
"""

from __future__ import annotations

import random
import re

from srpo_dsl.envs.arith import make_arith_tasks
from srpo_dsl.models.episodes import (
    SOLVERS,
    TOOL,
    VERDICTS,
    ToolRun,
    commit_team_event,
    parse_team_verdict,
    start,
    team_prompt,
    templates_dir,
)
from srpo_dsl.models.recipe import Recipe
from srpo_dsl.runtime.parsers import parse_boxed
from srpo_dsl.runtime.prompts import PromptRenderer

# Transcript statistics (tuned for 20-60% sampled team accuracy after the warm-up).
P_CORRECT = 0.6  # a solver's answer is right
P_MALFORMED = 0.08  # an output breaks its contract
P_VERIFIER_NOISE = 0.1  # the verdict is flipped
P_PICK_RIGHT = 0.7  # the aggregator copies the right candidate when there is one
OFFSETS = (-10, -2, -1, 1, 2, 10)

# The tool agent's.
P_CALL = 0.5  # a first turn (or one after a malformed output) asks the calculator, at any difficulty
P_MISCOPY = 0.1  # the query is the question with one operand off: the answer must come from the result
P_DIRECT = {"easy": 0.9, "medium": 0.5, "hard": 0.02}  # a direct answer is right
P_COPY = 0.95  # after a result, the answer copies it (else a near miss of it)
P_RECALL = 0.05  # after a result, the agent asks again
HARD_OFFSETS = (-100, -10, -1, 1, 10, 100)  # a near miss of a product


def transcript_rows(recipe: Recipe, seed: int) -> list[tuple[str, str]]:
    """(prompt, response) of every event of `recipe.episodes` team episodes, then of every turn of
    `recipe.tool_episodes` tool-agent episodes."""
    rng = random.Random(seed)
    renderer = PromptRenderer([templates_dir()])
    rows = [
        row for task in make_arith_tasks(recipe.episodes, seed) for row in team_episode(rng, task, renderer)
    ]
    tool_rng = random.Random(f"{seed}/tools")  # its own stream: the team's transcripts stay as they were
    graded = make_arith_tasks(recipe.tool_episodes, seed, mix="graded")
    rows += [row for task in graded for row in tool_episode(tool_rng, task, renderer)]
    return rows


# --- the team ----------------------------------------------------------------------------


def _near_miss(rng: random.Random, total: int, offsets: tuple[int, ...] = OFFSETS) -> str:
    return str(abs(total + rng.choice(offsets)))


def _maybe_malformed(rng: random.Random, good: str) -> str:
    """Mostly `good`; sometimes a contract-breaking variant: unclosed, unwrapped or empty."""
    if rng.random() >= P_MALFORMED:
        return good
    return rng.choice([good[:-1], re.sub(r"\\boxed\{(.*)\}", r"\1", good), re.sub(r"\{.*\}", "{}", good)])


def team_episode(rng: random.Random, task: dict, renderer: PromptRenderer) -> list[tuple[str, str]]:
    """(prompt, response) of the two solvers, the verifier and the aggregator of one episode."""
    total = int(task["answer"])
    ep = start(task)
    prompts = [team_prompt(renderer, ep, "solver", replica) for replica in range(1, SOLVERS + 1)]
    solved = []
    for _ in range(SOLVERS):
        value = task["answer"] if rng.random() < P_CORRECT else _near_miss(rng, total)
        solved.append(_maybe_malformed(rng, f"\\boxed{{{value}}}"))
    commit_team_event(ep, "solver", solved, parse_boxed)
    right = [m["value"] == task["answer"] for m in ep.team_context]
    approve = all(right) != (rng.random() < P_VERIFIER_NOISE)
    verdict = f"<verify>{VERDICTS[0] if approve else VERDICTS[1]}</verify>"
    verdict = verdict if rng.random() >= P_MALFORMED else verdict[: -len("</verify>")]
    prompts.append(team_prompt(renderer, ep, "verifier", 1))
    candidates = [m["value"] for m in ep.team_context if m["valid"]]
    if any(right) and rng.random() < P_PICK_RIGHT:
        final = task["answer"]
    elif candidates:
        final = rng.choice(candidates)
    else:
        final = task["answer"] if rng.random() < P_CORRECT else _near_miss(rng, total)
    commit_team_event(ep, "verifier", [verdict], parse_team_verdict)
    prompts.append(team_prompt(renderer, ep, "aggregator", 1))
    answer = _maybe_malformed(rng, f"FINAL: \\boxed{{{final}}}")
    return list(zip(prompts, [*solved, verdict, answer]))


# --- the tool agent ----------------------------------------------------------------------


def tool_episode(rng: random.Random, task: dict, renderer: PromptRenderer) -> list[tuple[str, str]]:
    """(prompt, response) of every turn of one tool-agent episode."""
    run, rows = ToolRun(start(task)), []
    while not run.done:
        prompt = run.prompt(renderer)
        text = _act(rng, task, run)
        run.commit(text)
        rows.append((prompt, text))
    return rows


def _act(rng: random.Random, task: dict, run: ToolRun) -> str:
    """The synthetic agent's next output: ask the calculator, answer directly (right by difficulty),
    or answer with the last result (mostly copied right); sometimes malformed."""
    offsets = HARD_OFFSETS if task["difficulty"] == "hard" else OFFSETS
    result = run.last_result()
    may_ask = TOOL in run.actions
    if result is not None and not (may_ask and rng.random() < P_RECALL):
        value = result if rng.random() < P_COPY else _near_miss(rng, int(result), offsets)
    elif result is None and not (may_ask and rng.random() < P_CALL):
        right = rng.random() < P_DIRECT[task["difficulty"]]
        value = task["answer"] if right else _near_miss(rng, int(task["answer"]), offsets)
    else:
        return _broken(rng, f"<{TOOL}>{_query(rng, task['question'])}</{TOOL}>")
    return _broken(rng, f"<answer>{value}</answer>")


def _query(rng: random.Random, question: str) -> str:
    """The question, or (sometimes) the question with its first operand off by one."""
    if rng.random() >= P_MISCOPY:
        return question
    first, op, second = re.fullmatch(r"(\d+)([+*])(\d+)", question).groups()  # type: ignore[union-attr]
    return f"{abs(int(first) + rng.choice((-1, 1)))}{op}{second}"


def _broken(rng: random.Random, good: str) -> str:
    """Mostly `good`; sometimes a contract-breaking variant: unclosed, untagged or empty."""
    if rng.random() >= P_MALFORMED:
        return good
    return rng.choice([good[:-1], re.sub(r"<[^>]*>", "", good), re.sub(r">[^<]*<", "><", good)])
