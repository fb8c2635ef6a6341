"""The quickstart team and the tool agent, stepped through their episodes as the executor steps them.

The team is workflows/quickstart.srpo (two solvers, a verifier, an aggregator); the tool agent is
workflows/quickstart_tools.srpo (`act(calc, answer)`, 3 turns, then a forced answer). Prompts are
rendered from `workflows/quickstart/*.j2` and `workflows/quickstart_tools/solver.j2` with the
runtime's `PromptRenderer` from the executor's own `Episode.context`, so they are token for token
what the executor sends. Each event's outputs, parsed by the runtime's parsers, join the episode's
`team_context` and `history` in order (the aggregator sees both solvers' answers and the verdict;
the tool agent sees its calls and the calculator's results).

Both the synthetic transcripts (`transcripts.py`) and the evaluation (`evaluation.py`) step their
episodes through here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from srpo_dsl.envs.arith import calculate
from srpo_dsl.runtime.actions import action_of, allowed
from srpo_dsl.runtime.episode import Episode, Member, ObservationEntry, context_entry
from srpo_dsl.runtime.hooks import ToolResult
from srpo_dsl.runtime.parsers import Parsed, parse_act, parse_verdict
from srpo_dsl.runtime.prompts import PromptRenderer

SOLVERS = 2
POOL_SIZE = {"solver": SOLVERS, "verifier": 1, "aggregator": 1}  # as in workflows/quickstart.srpo
MAX_TOKENS = {"solver": 12, "verifier": 8, "aggregator": 16}  # as in workflows/quickstart.srpo
TEMPLATES = {role: f"quickstart/{role}.j2" for role in MAX_TOKENS}
VERDICTS = ("approve", "reject")

# The tool agent of workflows/quickstart_tools.srpo: `act(calc, answer)`, 3 turns, then a forced answer.
TOOL = "calc"
TOOL_ACTIONS = (TOOL, "answer")
TOOL_TURNS = 3
TOOL_MAX_TOKENS = 16
TOOL_TEMPLATE = "quickstart_tools/solver.j2"


def templates_dir() -> Path:
    """The quickstart templates: package data when installed, else the repository's `workflows/`."""
    packaged = Path(str(resources.files("srpo_dsl").joinpath("_data/workflows")))
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "workflows"


def start(task: dict) -> Episode:
    """A fresh episode of `task`, as the executor opens one."""
    return Episode(episode_id=f"{task['id']}/0", prompt_id=str(task["id"]), sample=0, task=task)


def team_prompt(renderer: PromptRenderer, ep: Episode, role: str, replica: int) -> str:
    """`role`'s prompt at `ep`'s state, rendered from the executor's own context (`Episode.context`)."""
    ctx = ep.context(role=role, replica=replica, pool_size=POOL_SIZE[role], turn=1, max_turns=1)
    return renderer.render(TEMPLATES[role], ctx)


def commit_team_event(ep: Episode, role: str, texts: list[str], parse: Callable[[str], Parsed]) -> None:
    """One event of `role` (replicas 1..K in order), as the executor commits it: the event counter
    moves on, every output joins the team context, a verifier's texts the feedback."""
    ep.step += 1
    for replica, text in enumerate(texts, start=1):
        parsed = parse(text)
        ep.team_context.append(context_entry(role, replica, text, parsed.valid, parsed.value))
    if role == "verifier":
        ep.feedback += texts


def parse_team_verdict(text: str) -> Parsed:
    """The verifier's output parsed against the team's verdicts."""
    return parse_verdict(text, VERDICTS)


@dataclass
class ToolRun:
    """One episode of workflows/quickstart_tools.srpo as the executor runs it: up to `TOOL_TURNS` turns
    (a `calc` action is answered by the calculator, whose observation joins the history; an answer
    ends the episode), then one turn that may only answer."""

    ep: Episode
    turns: int = 0  # outputs so far
    first_action: str | None = None
    answer: str | None = None  # the final action's value, when the last output took it
    done: bool = False

    @property
    def actions(self) -> tuple[str, ...]:
        return TOOL_ACTIONS if self.turns < TOOL_TURNS else TOOL_ACTIONS[-1:]

    def prompt(self, renderer: PromptRenderer) -> str:
        """The next turn's prompt, from the executor's own context (`Episode.context`)."""
        looping = self.turns < TOOL_TURNS
        turn, max_turns = (self.turns + 1, TOOL_TURNS) if looping else (1, 1)
        ctx = self.ep.context(
            role="solver", replica=1, pool_size=1, turn=turn, max_turns=max_turns, actions=self.actions
        )
        return renderer.render(TOOL_TEMPLATE, ctx)

    def commit(self, text: str) -> None:
        """The output committed as the executor commits it; a `calc` action's query answered by
        `calculate` (what the workflow's tool returns) as the tool's observation."""
        parsed = allowed(parse_act(text, TOOL_ACTIONS), self.actions)
        member = Member(0, "solver", 1, "lm", 0, [], [], [], text, parsed.valid, parsed.value)
        forced = self.turns == TOOL_TURNS
        self.ep.step += 1
        self.ep.commit_outputs([member])
        self.turns += 1
        action = action_of(member)
        self.first_action = self.first_action if self.turns > 1 else action
        if action == TOOL:
            query = str(parsed.value["value"])  # type: ignore[index]
            observation = ToolResult(query, calculate(query), None).observation(TOOL)
            self.ep.observations.append(observation)
            self.ep.observe(1, observation)
        self.answer = parsed.value["value"] if action == TOOL_ACTIONS[-1] else None  # type: ignore[index]
        self.done = action == TOOL_ACTIONS[-1] or forced

    def last_result(self) -> str | None:
        """The latest calculator result in the history, if any."""
        seen = [h.observation for h in self.ep.history if isinstance(h, ObservationEntry)]
        found = [o["result"] for o in seen if "result" in o]
        return found[-1] if found else None  # type: ignore[return-value]
