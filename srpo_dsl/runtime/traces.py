"""Event traces (`srpo-trace/4`): the contract between rollouts and training.

JSON Lines, one episode per line, written atomically. `read_traces` validates every line
with pydantic and reports incomplete events; the trainer reads nothing else. A training
run's traces also carry, per trained event, what the update did with it (`EventUpdate`).

Version 2 adds an event's `actions` (those its acting agent could take there). Version 3 records
branching rollouts: an event's `parent` (the event before it on its path), `path`, `branch` (an
alternative of a `branch` step: its sibling group, index, count, kept or not, score) and `tree_return`
(its backed-up return), and an episode's `leaves` (the paths of a tree); an environment's `words` (the
word each of its steps returned, for one declared with `emits verdict(...)`); and an event's `tries`
(the invalid outputs resampled for its members, an agent's `retries`: not members of its active set).
Older files read as version 3 with the new fields' defaults. Version 4 adds the joints of `branch N cross`
steps (an episode's `joints`: each joint's samples by agent, path, kept, score and return) and a crossed
sample's `branch.agent`; an event's `state_key` (the key its environments gave the state it acted from;
left out when there is none); and each member's `finish` and `stop_string` (how its turn ended). Older
files read with none.

The keys are those of version 1; the code names three of them otherwise, and they are mapped here only
(`to_trace` writes, `TraceEpisode` reads): an episode's `reward` is its team return
(`Episode.team_return`: the reward and the invalid-output penalty), its `score` the reward
(`Episode.reward`: the reward function alone), its `role_rewards` its returns by credit key
(`Episode.keyed_returns`). A trace read back
resolves its credit keys once, into each member's return (`TraceEpisode.returns`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator

from srpo_dsl.arguments import checked
from srpo_dsl.io import complete_lines, loads, not_utf8, write_atomic, write_lines_atomic
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.lang.compile.graph_formats import to_json
from srpo_dsl.runfolder import GRAPH
from srpo_dsl.runtime.credit import member_return, member_returns
from srpo_dsl.runtime.episode import BranchMark, Cost, EnvProgress, Episode, Event, Joint, Leaf, Member

SCHEMA: Final = "srpo-trace/4"
# older versions are read with the new fields' defaults
READABLE = ("srpo-trace/1", "srpo-trace/2", "srpo-trace/3", SCHEMA)


class TraceError(Exception):
    """A trace file that cannot be read; the message names the file and line."""


class EventUpdate(BaseModel):
    """What the training update did with one event: its members' advantages (in member order; None for a
    member that was not trained, of an agent with `trained = false`) and
    the clipped fraction of its clipping units over every epoch (srpo: the event's one ratio, so 0
    or 1 with one epoch; traj: its episode's one ratio, the same on every event of the episode; grpo
    and drmas: its tokens; seq: its rows); None when it had no unit."""

    model_config = ConfigDict(extra="forbid")

    advantages: list[float | None]
    clip_fraction: float | None


class TraceEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: str
    event_type: str
    node: str
    state_id: str
    cardinality: int
    complete: bool
    members: list[Member]
    observations: list[dict[str, object]] = []
    actions: list[str] = []  # v2: the actions its acting agent could take here; [] if it does not act
    parent: str | None = None  # v3: the event before it on its path
    path: str = ""  # v3: the path of a branching episode it was made on ("" the first)
    branch: BranchMark | None = None  # v3: an alternative of a `branch` step
    tree_return: float | None = None  # v3: its return backed up the tree (None: the episode's)
    tries: list[Member] = []  # v3: invalid outputs resampled for its members, in the order drawn
    state_key: str | None = None  # v4: the environments' key of the state it acted from (None: none)
    update: EventUpdate | None = None  # training traces only: the event was trained at this step

    @model_validator(mode="after")
    def _complete_means_all_members(self) -> TraceEvent:
        if self.complete and len(self.members) != self.cardinality:
            raise ValueError(
                f"event {self.event_id} is marked complete with {len(self.members)} of "
                f"{self.cardinality} members"
            )
        return self


class EnvSummary(BaseModel):
    """An environment's part of an episode: its steps, whether its last step said done, its rewards' sum,
    and (v3, an environment that declares words) the word each step returned."""

    model_config = ConfigDict(extra="forbid")

    steps: int
    done: bool
    reward: float
    words: list[str] = []


class TraceEpisode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: Literal["srpo-trace/1", "srpo-trace/2", "srpo-trace/3", "srpo-trace/4"] = SCHEMA
    episode_id: str
    prompt_id: str
    sample: int
    graph_hash: str
    reward: float
    score: float
    answer: object = None
    invalid_actions: int
    cost: Cost
    events: list[TraceEvent]
    role_rewards: dict[str, float] = {}  # returns by credit key (ROLE, ROLE#R, ROLE@N, ROLE#R@N)
    tool_errors: int = 0
    envs: dict[str, EnvSummary] = {}  # workflows with environments only (the key is left out otherwise)
    leaves: list[Leaf] = []  # v3: a tree's paths (the key is left out without tree branches)
    joints: list[Joint] = []  # v4: the joints of `branch N cross` steps (left out without them)

    _returns: dict[tuple[str, int], float] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _resolve_credit(self) -> TraceEpisode:
        """The credit keys resolved once, when the trace is made or read (`returns`)."""
        self._returns = member_returns(self.events, self.role_rewards, self.reward)
        return self

    @property
    def team_return(self) -> float:
        """The episode's return (the reward and the invalid-output penalty): the trace key `reward`."""
        return self.reward

    @property
    def returns(self) -> Mapping[tuple[str, int], float]:
        """(event id, member index) -> its member's return, the credit keys resolved once when the trace
        was made or read (`Episode.returns`); a member not in it has the team return."""
        return self._returns

    @checked
    def return_of(self, role: str, replica: int | None = None, round: int | None = None) -> float:
        return member_return(self.role_rewards, self.reward, role, replica, round)

    @checked
    def model_dump_line(self) -> str:
        data = self.model_dump()
        data.pop("schema_")
        data = {"schema": SCHEMA, **data}  # every field of this version is written, whatever was read
        for event in data["events"]:
            for key in ("update", "branch", "tree_return", "state_key"):  # left out when there is none
                if event[key] is None:
                    del event[key]
            if event.get("branch") and event["branch"]["agent"] is None:  # v4: a crossed sample's only
                del event["branch"]["agent"]
            if not event["path"]:
                del event["path"]
            for m in [*event["members"], *event["tries"]]:
                if m["stop_string"] is None:  # a turn that no stop string ended
                    del m["stop_string"]
        for key in ("envs", "leaves", "joints"):
            if not data[key]:
                del data[key]
        for env in data.get("envs", {}).values():
            if not env["words"]:  # an environment that returns `done`: the key is left out
                del env["words"]
        return json.dumps(data, separators=(",", ":"))

    @property
    def incomplete_events(self) -> list[TraceEvent]:
        return [e for e in self.events if not e.complete]


def to_trace(ep: Episode, graph_hash: str, updates: Mapping[str, EventUpdate] | None = None) -> TraceEpisode:
    """The episode's trace; `updates`: event id -> what the training update did with it."""
    updates = updates or {}
    return TraceEpisode(
        episode_id=ep.episode_id,
        prompt_id=ep.prompt_id,
        sample=ep.sample,
        graph_hash=graph_hash,
        reward=ep.team_return,
        score=ep.reward,
        answer=ep.answer,
        invalid_actions=ep.invalid_actions,
        cost=ep.cost,
        events=[_event(e, updates.get(e.event_id)) for e in ep.events],
        role_rewards=ep.keyed_returns,
        tool_errors=ep.tool_errors,
        envs={name: _env_summary(p) for name, p in ep.envs.items()},
        leaves=ep.leaves,
        joints=ep.joints,
    )


def _env_summary(progress: EnvProgress) -> EnvSummary:
    """Its steps, done and rewards; the words of its steps if it declares words (never `done`/`running`)."""
    said = [r.word for r in progress.log] if progress.says_words else []
    return EnvSummary(steps=progress.steps, done=progress.done, reward=progress.reward, words=said)


def _event(e: Event, update: EventUpdate | None) -> TraceEvent:
    """The executor's event as its trace record (members are shared, not copied: they are frozen)."""
    fields = {f.name: getattr(e, f.name) for f in dataclasses.fields(e)}
    if update is not None and len(update.advantages) < len(e.members):  # untrained members last
        missing = [None] * (len(e.members) - len(update.advantages))
        update = update.model_copy(update={"advantages": [*update.advantages, *missing]})
    return TraceEvent(**fields, update=update)


def write_traces(path: Path, episodes: Iterable[TraceEpisode]) -> None:
    """Write all episodes to `path` via a temporary file and a rename: never half-written."""
    write_lines_atomic(path, (ep.model_dump_line() + "\n" for ep in episodes))


def write_graph(out: Path, graph: EventGraph) -> None:
    """OUT/graph.json: the workflow's event graph (node-link JSON) beside its traces, so that a run or a
    results folder is viewable without the workflow."""
    write_atomic(out / GRAPH, to_json(graph.to_networkx()) + "\n")


def read_traces(path: Path) -> list[TraceEpisode]:
    """Validate and load every episode; `TraceError` names the first bad line, or says there is none."""
    return _episodes(path, _read(path).splitlines(), None)


@dataclass(frozen=True)
class PartialTraces:
    """The complete episodes of a traces file whose writer may have been killed mid-line."""

    episodes: list[TraceEpisode]
    cut_line: int | None  # the unfinished last line left out (None: the file is whole)


def read_partial_traces(path: Path) -> PartialTraces:
    """As `read_traces`, but an unfinished last line (no newline, not valid JSON) is left out;
    `TraceError` when any other line is bad or no episode is complete."""
    lines, cut = complete_lines(_read(path))
    return PartialTraces(_episodes(path, lines, cut), cut)


def _episodes(path: Path, lines: list[str], cut: int | None) -> list[TraceEpisode]:
    """The episodes of `lines`; `TraceError` when there is none (an empty file holds no run's traces)."""
    episodes = [parse_episode(path, i, line) for i, line in enumerate(lines, 1) if line.strip()]
    if not episodes:
        what = f"only an unfinished line {cut}" if cut else "no episode"
        raise TraceError(f"{path}: {what} (an empty or truncated traces file)")
    return episodes


def parse_episode(path: Path, lineno: int, line: str) -> TraceEpisode:
    """One line as an episode; `TraceError` at `path:lineno` for bad JSON, schema or fields."""
    try:
        data = loads(line)
        if not isinstance(data, dict) or data.get("schema") not in READABLE:
            found = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise TraceError(
                f"{path}:{lineno}: schema {found!r} is not one of {', '.join(READABLE)} "
                "(written by another version of srpo-dsl?)"
            )
        data["schema_"] = data.pop("schema")
        return TraceEpisode.model_validate(data)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{lineno}: invalid JSON: {exc.msg}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise TraceError(f"{path}:{lineno}: {where}: {err['msg']}") from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"cannot read {path}: it is a directory") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"cannot read {path}: {not_utf8(exc)}") from None
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
