"""What an update did with each trained event, for the traces of a checkpointed step (docs/traces.md).

Per event: its members' advantages in member order, and the clipped fraction of its clipping
units over every epoch (`PolicyTerms.row_clips` per row, summed over the event's rows: srpo
counts the event's one ratio once, traj its episode's one ratio once on each of the episode's
events, grpo and drmas its tokens, seq its rows).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from srpo_dsl.runtime.traces import EventUpdate


def event_updates(
    members: Sequence[tuple[str, int]], advantages: Tensor, clips: Tensor
) -> dict[str, EventUpdate]:
    """event id -> its `EventUpdate`, from the rows' (event id, member index), [N] advantages and
    [N, 2] (clipped units, units)."""
    rows: dict[str, list[tuple[int, float, float, float]]] = {}
    for (event_id, member), advantage, (clipped, units) in zip(members, advantages.tolist(), clips.tolist()):
        rows.setdefault(event_id, []).append((member, advantage, clipped, units))
    out = {}
    for event_id, event_rows in rows.items():
        clipped = sum(r[2] for r in event_rows)
        units = sum(r[3] for r in event_rows)
        given = {r[0]: r[1] for r in event_rows}  # members left out (`trained = false`) have none
        out[event_id] = EventUpdate(
            advantages=[given.get(i) for i in range(max(given) + 1)],
            clip_fraction=clipped / units if units > 0 else None,
        )
    return out
