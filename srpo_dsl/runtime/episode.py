"""One episode's state while the executor runs it: position, memory, loop counters, events; and the tree
of paths a branching rollout makes (`Tree`: its paths are episodes, and each path holds its tree)."""

from __future__ import annotations

import copy
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import ConfigDict

from srpo_dsl.lang.checks.declarations import ENV_DONE
from srpo_dsl.runtime.credit import member_returns, role_rounds


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
    behavior_logprobs: list[float]  # log mu, one per response token
    text: str
    valid: bool
    parsed: object = None
    finish: str | None = None  # v4: how its turn ended (`choices.FINISH_REASONS`); None before v4
    stop_string: str | None = None  # v4: the stop string that ended it (`finish` "stop")

    def __post_init__(self) -> None:
        if len(self.behavior_logprobs) != len(self.response_token_ids):
            raise ValueError(
                f"member {self.member_index}: {len(self.behavior_logprobs)} log-probs for "
                f"{len(self.response_token_ids)} response tokens"
            )


@dataclass(frozen=True)
class BranchMark:
    """An event that is one alternative of a `branch` step: its siblings share `group` (and the pre-action
    state); `kept`: it continued (every alternative of a tree does); `score`: its scorer's value."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    group: str
    index: int  # 0-based, in sampling order
    of: int  # the branch's count N
    kept: bool
    score: float | None = None  # crossed: the mean of the scores of the joints it takes part in
    agent: str | None = None  # `branch N cross`: the agent whose sample this is (its siblings: its own N)


@dataclass
class Joint:
    """One joint combination of a `branch N cross` step: a sample of each crossed agent, by index (its
    `tree_return` is set when a tree's returns are backed up)."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    group: str  # its samples' `BranchMark.group`
    samples: dict[str, int]  # agent -> the index of its sample in this joint, in the step's agent order
    path: str | None  # the path it continued on; None: pruned (`keep`), it ended there
    kept: bool  # it continued (every joint of a tree does)
    score: float | None  # the step's scorer on the joint's members; None: unscored
    tree_return: float = 0.0  # its return R_j (docs/objective.md); each sample's: the mean of its joints'


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
    observations: list[dict[str, object]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)  # what its acting agent could take; [] if none
    parent: str | None = None  # the event before it on its path (None: the episode's first)
    path: str = ""  # the path of a branching episode it was made on ("": the first; ".1.0": a child's child)
    branch: BranchMark | None = None  # an alternative of a `branch` step
    tree_return: float | None = None  # its return as a branching episode backs it up (None: the episode's)
    state_key: str | None = None  # the environments' key of the state it acted from (`Episode.state_key`)
    # invalid outputs resampled for its members (an agent's `retries`), member by member in the order drawn;
    # each has the member_index of the member it was resampled for; not members of the active set
    tries: list[Member] = field(default_factory=list)


@dataclass(frozen=True)
class Cost:
    """An episode's cost proxies (docs/traces.md): generated tokens, model calls (sum of K), tool calls."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    tokens: int
    calls: int
    tool_calls: int


@dataclass(frozen=True)
class Leaf:
    """One path of a tree-branching episode that ran to its end, as a trace's `leaves` hold it: its fields
    are the trace's keys, like `TraceEpisode`'s (`reward` the path's team return, `score` its reward)."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    path: str
    reward: float  # the path's `Episode.team_return`: its reward and the invalid-output penalty
    score: float  # the path's `Episode.reward`: the reward function alone
    answer: object = None

    @property
    def team_return(self) -> float:
        return self.reward


@dataclass(frozen=True)
class EnvStepResult:
    """What one step of an environment decided, checked (`runtime.environments`)."""

    word: str  # its recorded state, which conditions test: a declared word, else `done` or `running`
    reward: float  # the step's own reward (with `reward ENV`, the episode's score sums them)
    credit: Mapping[str, float] = field(default_factory=dict)  # credit key -> a member's reward instead
    selected: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # pool -> replicas acting next
    key: str | None = None  # the state key it returned with its observations (None: none)


@dataclass
class EnvProgress:
    """An environment's part of one episode: the state it keeps (created empty for each episode, kept
    across its steps, mutated by the environment) and what each of its steps decided."""

    state: dict[str, object] = field(default_factory=dict)
    log: list[EnvStepResult] = field(default_factory=list)
    says_words: bool = False  # it declares words (`emits verdict(...)`), which its steps return

    @property
    def steps(self) -> int:
        return len(self.log)

    @property
    def done(self) -> bool:
        """Whether its last step said done."""
        return bool(self.log) and self.log[-1].word == ENV_DONE

    @property
    def reward(self) -> float:
        """The sum of its steps' own rewards."""
        return sum(r.reward for r in self.log)

    @property
    def key(self) -> str | None:
        """The state key its last step returned (None before any, or when that step returned none)."""
        return self.log[-1].key if self.log else None

    def view(self) -> EnvView:
        return EnvView(copy.deepcopy(self.state), tuple(self.log))


@dataclass(frozen=True)
class EnvView:
    """An environment as a Python reward reads it: its final state (a copy) and each step's decision."""

    state: Mapping[str, object]
    steps: tuple[EnvStepResult, ...]

    @property
    def reward(self) -> float:
        return sum(r.reward for r in self.steps)

    @property
    def word(self) -> str | None:
        """Its last step's word (None before any)."""
        return self.steps[-1].word if self.steps else None


def context_entry(role: str, replica: int, text: str, valid: bool, value: object) -> dict[str, object]:
    """One committed output as later roles see it: an item of `team_context` (and `memory.accepted`)."""
    return {"role": role, "replica": replica, "text": text, "valid": valid, "value": value}


class HistoryEntry(ABC):
    """An item of an episode's `history`: Python code reads its attributes; a template's context holds it
    as the dict docs/dsl.md documents, `kind` ("output" or "observation") and its fields (`as_dict`)."""

    kind: ClassVar[str]

    @abstractmethod
    def as_dict(self) -> dict[str, object]:
        """The entry as a template sees it, `kind` first."""


@dataclass(frozen=True)
class OutputEntry(HistoryEntry):
    """A committed output (`kind` "output"): what `context_entry` records of it."""

    kind: ClassVar[str] = "output"
    role: str
    replica: int
    text: str
    valid: bool
    value: object

    def as_dict(self) -> dict[str, object]:
        entry = context_entry(self.role, self.replica, self.text, self.valid, self.value)
        return {"kind": self.kind, **entry}


@dataclass(frozen=True)
class ObservationEntry(HistoryEntry):
    """An observation for the member `replica` (`kind` "observation"): a tool's `{tool, query, result |
    documents | error}` or an environment's `{env, agent, result}`, as the episode's `observations` hold
    it."""

    kind: ClassVar[str] = "observation"
    replica: int
    observation: Mapping[str, object]

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "replica": self.replica, **self.observation}


@dataclass
class Episode:
    """A rollout of the graph for one task; `sample` is its index in the prompt's group."""

    episode_id: str
    prompt_id: str
    sample: int
    task: dict[str, object]
    node: str = "start"
    step: int = 0  # events so far
    loops: dict[str, int] = field(default_factory=dict)
    state: dict[str, object] = field(default_factory=dict)  # agent -> last verdict word / route value
    last_output: dict[str, list[Member]] = field(default_factory=dict)  # agent -> members of its last event
    team_context: list[dict[str, object]] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    # Python tools' {tool, query, result|error} and environments' {env, agent, result}
    observations: list[dict[str, object]] = field(default_factory=list)
    history: list[HistoryEntry] = field(default_factory=list)  # outputs and observations, in order
    envs: dict[str, EnvProgress] = field(default_factory=dict)  # environment -> its part of the episode
    spent: dict[tuple[str, int], int] = field(default_factory=dict)  # (agent, replica) -> tokens generated
    stopped: set[tuple[str, int]] = field(
        default_factory=set
    )  # replicas that took no more turns (runtime.turns)
    events: list[Event] = field(default_factory=list)
    invalid_actions: int = 0
    tool_calls: int = 0
    tool_errors: int = 0  # tool calls that failed or timed out (each an error observation)
    done: bool = False
    reward: float = 0.0  # the reward function alone (1 = correct); a trace's `score`
    team_return: float = 0.0  # the reward + the penalty per invalid action; a trace's `reward`
    keyed_returns: dict[str, float] = field(default_factory=dict)  # by credit key, if the reward keyed them
    # (event id, member index) -> its member's return, when the reward keyed returns (`record_returns`);
    # a member not in it (every member when the reward keyed none) has the team return
    returns: dict[tuple[str, int], float] = field(default_factory=dict)
    answer: object = None
    path: str = ""  # which path of a branching rollout this is ("": the first; ".2": a tree's third child)
    tree: Tree | None = None  # while it runs: the rollout's tree of paths (shared by every path of it)
    leaves: list[Leaf] = field(default_factory=list)  # a finished tree's paths (its root's `events`: all)
    joints: list[Joint] = field(
        default_factory=list
    )  # a finished rollout's crossed joints (`branch N cross`)

    @property
    def event_prefix(self) -> str:
        """What the ids of the events made on this path start with."""
        return f"{self.episode_id}{self.path}"

    def fork(self, index: int) -> Episode:
        """A child path: a copy of this one's state that shares its events (they are the common prefix)."""
        shared: dict[int, object] = {id(self.tree): self.tree, id(self.task): self.task}
        for e in self.events:
            shared[id(e)] = e
            shared.update((id(m), m) for m in e.members)
        child = copy.deepcopy(self, shared)
        child.path = f"{self.path}.{index}"
        return child

    def record_returns(self, reward: float, team_return: float, keyed: Mapping[str, float]) -> None:
        """Record the episode's reward, team return and returns by credit key, and resolve the keys once
        into each member's return (`returns`: `runtime.credit.member_returns`)."""
        self.reward, self.team_return, self.keyed_returns = reward, team_return, dict(keyed)
        self.returns = member_returns(self.events, self.keyed_returns, team_return)

    def state_key(self) -> str | None:
        """The key of the state the next event acts from: each environment's last step's key. One keyed
        environment: its key; several: `ENV=KEY` for each, by name, joined by spaces; None: no key."""
        keys = sorted((name, p.key) for name, p in self.envs.items() if p.key is not None)
        if len(keys) == 1:
            return keys[0][1]
        return " ".join(f"{name}={key}" for name, key in keys) or None

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
                self.observations,
            ],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def commit_outputs(self, members: list[Member]) -> None:
        """An event's outputs become visible to the roles that act after it."""
        entries = [OutputEntry(m.role, m.replica, m.text, m.valid, m.parsed) for m in members]
        self.team_context += [context_entry(e.role, e.replica, e.text, e.valid, e.value) for e in entries]
        self.history += entries

    def observe(self, replica: int, observation: Mapping[str, object]) -> None:
        """An observation for the member `replica` (a tool's, for the member that asked) joins the history."""
        self.history.append(ObservationEntry(replica, observation))

    def context(
        self,
        *,
        role: str,
        replica: int,
        pool_size: int,
        turn: int,
        max_turns: int,
        actions: tuple[str, ...] = (),
    ) -> dict[str, object]:
        """The template variables of docs/dsl.md (`agent ... prompt`) (see `srpo_dsl.runtime.prompts`)."""
        return {
            "actions": list(actions),
            "history": [h.as_dict() for h in self.history],
            "new_history": [h.as_dict() for h in self.history[self.seen_by(role, replica) :]],
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
            "observations": list(self.observations),
            "observation": self.observation_for(role),
            "memory": {
                "accepted": list(self.team_context),
                "feedback": list(self.feedback),
                "documents": list(self.documents),
                "observations": list(self.observations),
            },
        }

    def seen_by(self, role: str, replica: int) -> int:
        """How many history entries come before and include the replica's own last output (0: none)."""
        for i in range(len(self.history) - 1, -1, -1):
            h = self.history[i]
            if isinstance(h, OutputEntry) and h.role == role and h.replica == replica:
                return i + 1
        return 0

    def observation_for(self, role: str) -> str | None:
        """The latest observation an environment addressed to `role` (None before any)."""
        for o in reversed(self.observations):
            if "env" in o and o["agent"] == role:
                result = o["result"]  # `bounded` text
                return result if isinstance(result, str) else None
        return None

    @property
    def cost(self) -> Cost:
        """Tokens: every output generated, resampled tries included; calls: the sum of K (members only)."""
        members = [m for e in self.events for m in e.members]
        tokens = sum(len(m.response_token_ids) for e in self.events for m in [*e.members, *e.tries])
        return Cost(tokens, len(members), self.tool_calls)

    def view(self, role_of: Callable[[Event], str]) -> EpisodeView:
        """A read-only copy for a Python reward: the events so far, with their roles."""
        events = tuple(
            EventView(
                e.event_id,
                e.event_type,
                role_of(e),
                rounds.get(role_of(e)),
                e.complete,
                tuple(e.members),
                tuple(e.observations),
            )
            for e, rounds in zip(self.events, role_rounds(self.events))
        )
        return EpisodeView(
            self.episode_id,
            self.prompt_id,
            self.sample,
            dict(self.task),
            self.answer,
            events,
            self.invalid_actions,
            self.tool_errors,
            self.cost,
            {name: progress.view() for name, progress in self.envs.items()},
        )


@dataclass
class Fork:
    """Where a path split into a tree branch's alternatives: the child paths, in alternative order."""

    parent: Episode  # the path that split (done from then on)
    children: list[Episode]
    taken: list[list[Event]]  # the events each child took: its alternative, or its joint's samples (cross)
    scores: list[float | None]
    joints: list[Joint] = field(default_factory=list)  # a cross branch's joints, one per child


@dataclass
class Tree:
    """The rollout of one sample of one prompt: every path and every event (pruned alternatives too),
    in the order they were made. Without tree branches it has one path, the episode itself."""

    root: Episode
    paths: list[Episode] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    forks: dict[str, Fork] = field(default_factory=dict)  # the path that split -> its fork
    joints: list[Joint] = field(default_factory=list)  # every `branch N cross` joint, in the order made

    @property
    def done(self) -> bool:
        return all(p.done for p in self.paths)

    @property
    def leaves(self) -> list[Episode]:
        return [p for p in self.paths if p.path not in self.forks]

    def tool_calls(self) -> tuple[int, int]:
        """(tool calls, failed tool calls) of every path, each counted once (a child path starts with the
        counts of the path it split from)."""
        calls = sum(p.tool_calls for p in self.paths)
        errors = sum(p.tool_errors for p in self.paths)
        for f in self.forks.values():
            calls -= len(f.children) * f.parent.tool_calls
            errors -= len(f.children) * f.parent.tool_errors
        return calls, errors


@dataclass(frozen=True)
class EventView:
    """One event as a Python reward sees it: who acted, in which round, its members (outputs, validity,
    replicas), observations."""

    event_id: str
    event_type: str
    role: str
    round: int | None  # the role's round: its N-th event in the episode (None: no member came back)
    complete: bool
    members: tuple[Member, ...]
    observations: tuple[Mapping[str, object], ...]


@dataclass(frozen=True)
class EpisodeView:
    """The episode a 3-argument Python reward receives, after its last step (read-only)."""

    episode_id: str
    prompt_id: str
    sample: int
    task: dict[str, object]
    answer: object
    events: tuple[EventView, ...]
    invalid_actions: int
    tool_errors: int
    cost: Cost
    envs: Mapping[str, EnvView] = field(default_factory=dict)  # each environment that stepped
