"""An episode's events and their members built by hand, as credit assignment reads them (no rollout)."""

from __future__ import annotations

from srpo_dsl.runtime.episode import Event, Member


def make_member(role: str, replica: int, index: int = 0) -> Member:
    return Member(index, role, replica, "lm", 0, [1], [2], [0.0], "x", True)


def make_event(ep_id: str, n: int, event_type: str, *members: Member) -> Event:
    return Event(f"{ep_id}/e{n}", event_type, event_type, "s", len(members), True, list(members))
