"""Event traces (`srpo-trace/1`): the contract between rollouts and training.

JSON Lines, one episode per line, written atomically. `read_traces` validates every line
with pydantic and reports incomplete events; the trainer reads nothing else.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from srpo_dsl.io import write_lines_atomic
from srpo_dsl.runtime.episode import Cost, Episode, Event, Member

SCHEMA = "srpo-trace/1"


class TraceError(Exception):
    """A trace file that cannot be read; the message names the file and line."""


class TraceEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: str
    event_type: str
    node: str
    state_id: str
    cardinality: int
    complete: bool
    members: list[Member]
    observations: list[dict] = []

    @model_validator(mode="after")
    def _complete_means_all_members(self) -> TraceEvent:
        if self.complete and len(self.members) != self.cardinality:
            raise ValueError(
                f"event {self.event_id} is marked complete with {len(self.members)} of "
                f"{self.cardinality} members"
            )
        return self


class TraceEpisode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: Literal["srpo-trace/1"] = SCHEMA
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
    role_rewards: dict[str, float] = {}
    tool_errors: int = 0

    def return_of(self, role: str) -> float:
        return self.role_rewards.get(role, self.reward)

    def model_dump_line(self) -> str:
        data = self.model_dump()
        data["schema"] = data.pop("schema_")
        return json.dumps(data, separators=(",", ":"))

    @property
    def incomplete_events(self) -> list[TraceEvent]:
        return [e for e in self.events if not e.complete]


def to_trace(ep: Episode, graph_hash: str) -> TraceEpisode:
    return TraceEpisode(
        episode_id=ep.episode_id,
        prompt_id=ep.prompt_id,
        sample=ep.sample,
        graph_hash=graph_hash,
        reward=ep.reward,
        score=ep.score,
        answer=ep.answer,
        invalid_actions=ep.invalid_actions,
        cost=ep.cost,
        events=[_event(e) for e in ep.events],
        role_rewards=ep.role_rewards,
        tool_errors=ep.tool_errors,
    )


def _event(e: Event) -> TraceEvent:
    """The executor's event as its trace record (members are shared, not copied: they are frozen)."""
    fields = {f.name: getattr(e, f.name) for f in dataclasses.fields(e)}
    return TraceEvent(**fields)


def write_traces(path: Path, episodes: Iterable[TraceEpisode]) -> None:
    """Write all episodes to `path` via a temporary file and a rename: never half-written."""
    write_lines_atomic(path, (ep.model_dump_line() + "\n" for ep in episodes))


def read_traces(path: Path) -> list[TraceEpisode]:
    """Validate and load every episode; `TraceError` names the first bad line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise TraceError(f"cannot read {path}: no such file") from None
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if data.get("schema") != SCHEMA:
                raise TraceError(f"{path}:{i}: not a {SCHEMA} episode (schema {data.get('schema')!r})")
            data["schema_"] = data.pop("schema")
            out.append(TraceEpisode.model_validate(data))
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{i}: invalid JSON: {exc.msg}") from None
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise TraceError(f"{path}:{i}: {where}: {err['msg']}") from None
    return out
