"""Credit per member and per round (docs/objective.md §5): the keys of a Python reward's mapping.

    ROLE          every member of the role
    ROLE#R        replica R (1-based) of the role's pool
    ROLE@N        the role's N-th round: its N-th event in the episode (1-based)
    ROLE#R@N      replica R in round N

A member's return is the value of the most specific key that names it, else the episode's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

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
    role: str


class _Event(Protocol):
    @property
    def members(self) -> Sequence[_Member]: ...


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
