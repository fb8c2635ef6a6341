"""Credit per member and per round (docs/objective.md §5): the keys of a Python reward's mapping.

    ROLE          every member of the role
    ROLE#R        replica R (1-based) of the role's pool
    ROLE@N        the role's N-th round: its N-th event in the episode (1-based)
    ROLE#R@N      replica R in round N

A member's return is the value of the most specific key that names it, else the episode's. A Python
reward returns such a mapping once per episode; an environment may return one at each of its steps
(`summed_returns`: a member's return is then the sum over the steps).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from srpo_dsl.runtime.usercode import finite_number, shorten

_KEY = re.compile(r"(?P<role>[A-Za-z_][A-Za-z0-9_]*)(?:#(?P<replica>[0-9]+))?(?:@(?P<round>[0-9]+))?")
SYNTAX = "ROLE, ROLE#REPLICA, ROLE@ROUND or ROLE#REPLICA@ROUND"


@dataclass(frozen=True)
class CreditKey:
    """Whose return a key names: a role, optionally one replica, optionally one round."""

    role: str
    replica: int | None = None
    round: int | None = None

    @classmethod
    def parse(cls, text: object) -> CreditKey | None:
        """The key `text` names (None if it is not of the syntax above)."""
        match = _KEY.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            return None
        replica, round_ = match["replica"], match["round"]
        return cls(match["role"], int(replica) if replica else None, int(round_) if round_ else None)

    def __str__(self) -> str:
        replica = "" if self.replica is None else f"#{self.replica}"
        return f"{self.role}{replica}{'' if self.round is None else f'@{self.round}'}"


class CreditError(ValueError):
    """A mapping of credit keys that names no member: `what` was returned, `why` that is wrong."""

    def __init__(self, what: str, why: str):
        super().__init__(f"{what}: {why}")
        self.what, self.why = what, why


def parse_credit(
    value: Mapping[object, object], pools: Mapping[str, int], rounds: Mapping[str, int]
) -> dict[str, float]:
    """`value`'s keys in canonical form -> its numbers; `CreditError` when a key is malformed, names an
    undeclared role, a replica outside its pool (`pools`: role -> replicas) or a round the role has not
    taken (`rounds`: role -> rounds taken), a value is not a finite number, or two keys name the same
    members."""
    keys = {key: CreditKey.parse(key) for key in value}
    malformed = [k for k, parsed in keys.items() if parsed is None]
    if malformed:
        raise CreditError(f"the key(s) {shorten(malformed)}", f"a key is {SYNTAX}")
    parsed_keys = {k: p for k, p in keys.items() if p is not None}
    unknown = [k for k, parsed in parsed_keys.items() if parsed.role not in pools]
    if unknown:
        raise CreditError(f"scores for {shorten(unknown)}", f"the roles are {', '.join(pools)}")
    for key, parsed in parsed_keys.items():
        problem = _out_of_range(parsed, pools[parsed.role], rounds.get(parsed.role, 0))
        if problem:
            raise CreditError(f"the key {key!r}", problem)
    numbers = {k: float(v) for k, v in value.items() if finite_number(v)}
    if len(numbers) < len(value):
        bad = {k: v for k, v in value.items() if k not in numbers}
        raise CreditError(shorten(bad), "every score is a finite number")
    credit = {str(parsed): numbers[key] for key, parsed in parsed_keys.items()}
    if len(credit) < len(keys):
        raise CreditError(shorten(list(keys)), "two keys name the same members")
    return credit


def _out_of_range(key: CreditKey, pool: int, taken: int) -> str | None:
    """Why `key` names no member of the episode (None if it names some)."""
    if key.replica is not None and not 1 <= key.replica <= pool:
        return f"`{key.role}` has replicas 1..{pool}"
    if key.round is not None and not 1 <= key.round <= taken:
        return f"rounds count from 1, and `{key.role}` took {taken} round(s) in this episode"
    return None


def member_return(
    returns: Mapping[str, float],
    default: float,
    role: str,
    replica: int | None = None,
    round: int | None = None,
) -> float:
    """The return of the member (role, replica, round) under `returns` (keys in the canonical form
    `str(CreditKey)`): its most specific key's value, else `default` (the episode's return)."""
    for rep, rnd in ((replica, round), (replica, None), (None, round), (None, None)):
        key = str(CreditKey(role, rep, rnd))
        if key in returns:
            return returns[key]
    return default


class _Member(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def replica(self) -> int: ...


class _Event(Protocol):
    @property
    def members(self) -> Sequence[_Member]: ...


class _Alternative(Protocol):
    @property
    def kept(self) -> bool: ...


class _IndexedMember(_Member, Protocol):
    @property
    def member_index(self) -> int: ...


class _RecordedEvent(Protocol):
    @property
    def event_id(self) -> str: ...
    @property
    def members(self) -> Sequence[_IndexedMember]: ...
    @property
    def branch(self) -> _Alternative | None: ...


def member_returns(
    events: Sequence[_RecordedEvent], keyed: Mapping[str, float], default: float
) -> dict[tuple[str, int], float]:
    """Each member's return under the credit keys `keyed`, by (event id, member index): the rounds are
    counted over the events its paths took (a pruned alternative is none, its return is backed up);
    empty when nothing is keyed (every member's return is then `default`, the episode's). A resampled
    try has the return of the member it was resampled for (same role, replica and round)."""
    if not keyed:
        return {}
    taken = [e for e in events if e.branch is None or e.branch.kept]
    return {
        (e.event_id, m.member_index): member_return(keyed, default, m.role, m.replica, rounds[m.role])
        for e, rounds in zip(taken, role_rounds(taken))
        for m in e.members
    }


def role_rounds(events: Iterable[_Event]) -> list[dict[str, int]]:
    """Per event, in order: each role with a member in it -> the event's round for that role."""
    taken: dict[str, int] = {}
    out = []
    for event in events:
        roles = dict.fromkeys(m.role for m in event.members)
        for role in roles:
            taken[role] = taken.get(role, 0) + 1
        out.append({role: taken[role] for role in roles})
    return out


def rounds_taken(events: Iterable[_Event]) -> dict[str, int]:
    """Each role -> the number of rounds it took (events with a member of it)."""
    return {role: n for rounds in role_rounds(events) for role, n in rounds.items()}


def summed_returns(
    steps: Sequence[tuple[float, Mapping[str, float]]], events: Sequence[_Event]
) -> dict[str, float]:
    """The returns of an environment that keyed its rewards: `steps` holds, per step, its own reward and
    its credit keys. Every member of `events` gets, under its most specific key `ROLE#R@N`, the sum over
    the steps of its most specific key's value at that step, else that step's own reward. Empty when no
    step keyed its reward (every member's return is then the episode's)."""
    if not any(credit for _, credit in steps):
        return {}
    out = {}
    for event, rounds in zip(events, role_rounds(events)):
        for m in event.members:
            n = rounds[m.role]
            total = sum(member_return(credit, own, m.role, m.replica, n) for own, credit in steps)
            out[str(CreditKey(m.role, m.replica, n))] = total
    return out
