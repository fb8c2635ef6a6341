"""One episode's state while the executor runs it: position, memory, loop counters, events."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from pydantic import ConfigDict


@dataclass(frozen=True)
class Member:
    """One sampled output of an event (a training row).

    The one definition of a trace member: the executor builds it, the trace schema
    (`runtime.traces.TraceEvent.members`) validates it with pydantic, extra keys forbidden.
    """

    __pydantic_config__ = ConfigDict(extra="forbid")

    member_index: int
    role: str
    replica: int
    policy: str
    policy_version: int
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    behavior_logprobs: list[float]
    text: str
    valid: bool
    parsed: object = None

    def __post_init__(self) -> None:
        if len(self.behavior_logprobs) != len(self.response_token_ids):
            raise ValueError(
                f"member {self.member_index}: {len(self.behavior_logprobs)} log-probs for "
                f"{len(self.response_token_ids)} response tokens"
            )


@dataclass
class Event:
    """The outputs consumed together by one state transition (the active set)."""

    event_id: str
    event_type: str
    node: str
    state_id: str
    cardinality: int  # expected K
    complete: bool
    members: list[Member]
    observations: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Cost:
    """An episode's cost proxies (SRPO.md §5): generated tokens, model calls (sum of K), tool calls."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    tokens: int
    calls: int
    tool_calls: int


@dataclass
class Episode:
    """A rollout of the graph for one task; `sample` is its index in the prompt's group."""

    episode_id: str
    prompt_id: str
    sample: int
    task: dict
    node: str = "start"
    step: int = 0  # events so far
    loops: dict[str, int] = field(default_factory=dict)
    state: dict[str, object] = field(default_factory=dict)  # agent -> last verdict word / route value
    last_output: dict[str, list[Member]] = field(default_factory=dict)  # agent -> members of its last event
    team_context: list[dict] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    invalid_actions: int = 0
    tool_calls: int = 0
    done: bool = False
    reward: float = 0.0  # team return: score + penalty per invalid action
    score: float = 0.0  # the reward function alone (1 = correct)
    answer: object = None

    def state_id(self) -> str:
        """Digest of the pre-action state: task, memory and counters (what every member sees)."""
        blob = json.dumps(
            [
                self.prompt_id,
                self.step,
                self.loops,
                [(c["role"], c["replica"], c["text"]) for c in self.team_context],
                self.feedback,
                self.documents,
            ],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def context(self, *, role: str, replica: int, pool_size: int, turn: int, max_turns: int) -> dict:
        """The template variables of DESIGN.md §3 (see `srpo_dsl.runtime.prompts`)."""
        return {
            "task": self.task,
            "step": self.step + 1,
            "turn": turn,
            "max_turns": max_turns,
            "role": role,
            "replica": replica,
            "pool_size": pool_size,
            "team_context": list(self.team_context),
            "feedback": list(self.feedback),
            "documents": list(self.documents),
            "memory": {
                "accepted": list(self.team_context),
                "feedback": list(self.feedback),
                "documents": list(self.documents),
            },
        }

    @property
    def cost(self) -> Cost:
        members = [m for e in self.events for m in e.members]
        return Cost(sum(len(m.response_token_ids) for m in members), len(members), self.tool_calls)
