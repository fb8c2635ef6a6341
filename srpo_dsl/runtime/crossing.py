"""Cross pairing (`KIND a, b branch N cross`): each agent's N samples and the joint combinations they make.

CoMLRL's cross joint mode: every agent of the step samples N alternatives of its own part from the one
pre-action state (N requests per member, all in the round's batch), and every combination of one sample
of each agent (N^agents, row-major in the step's agent order: the last agent's index varies fastest) is
a joint: an alternative of the step, scored on its members, then kept or continued as a `branch`'s
alternative is (`runtime.branching`). Each agent's sample is an event of its own (its K_e: that agent's
members), grouped with the agent's other N-1 samples; its return is the mean of its joints' returns.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from srpo_dsl.lang.checks.declarations import BranchInfo
from srpo_dsl.runtime.episode import BranchMark, Event, Joint, Member


def combinations(branch: BranchInfo) -> list[dict[str, int]]:
    """Every joint: each crossed agent -> its sample's index, row-major in the step's agent order."""
    picks = itertools.product(range(branch.count), repeat=len(branch.cross))
    return [dict(zip(branch.cross, pick)) for pick in picks]


def renumber(event: Event, first: int) -> Event:
    """A crossed sample's members (and their resampled tries) numbered within its own event: the step's
    member index less `first`, that of the agent's first member (an agent's members are consecutive)."""
    event.members = [dataclasses.replace(m, member_index=m.member_index - first) for m in event.members]
    event.tries = [dataclasses.replace(m, member_index=m.member_index - first) for m in event.tries]
    return event


def taken_by(samples: dict[str, list[Event]], joints: Sequence[dict[str, int]]) -> list[list[Event]]:
    """The sample events each joint takes, in the step's agent order."""
    return [[samples[agent][index] for agent, index in joint.items()] for joint in joints]


def members_of(events: Sequence[Event]) -> list[Member]:
    """A joint's members: each sample's, in the step's agent order."""
    return [m for e in events for m in e.members]


def complete_and_valid(events: Sequence[Event]) -> bool:
    """A joint whose samples are complete and whose members are all valid (`keep first` takes the first)."""
    return all(e.complete and all(m.valid for m in e.members) for e in events)


def mark_samples(
    group: str,
    samples: dict[str, list[Event]],
    joints: Sequence[dict[str, int]],
    scores: Sequence[float | None],
    kept: Sequence[bool],
) -> None:
    """Each sample's `branch` mark: its agent, its index among the agent's N, kept when a kept joint takes
    it, and the mean score of the joints it takes part in (None unscored)."""
    for agent, events in samples.items():
        for index, e in enumerate(events):
            mine = [j for j, joint in enumerate(joints) if joint[agent] == index]
            scored = [s for s in (scores[j] for j in mine) if s is not None]
            score = sum(scored) / len(scored) if scored else None
            e.branch = BranchMark(group, index, len(events), any(kept[j] for j in mine), score, agent)


def joint_records(
    group: str,
    joints: Sequence[dict[str, int]],
    paths: Sequence[str | None],
    scores: Sequence[float | None],
    returns: Sequence[float] | None = None,
) -> list[Joint]:
    """The trace's record of each joint: the path it continued on (None: pruned), its score and return
    (a tree's returns are set when they are backed up)."""
    rets = returns if returns is not None else [0.0] * len(joints)
    return [
        Joint(group, dict(joint), path, path is not None, score, ret)
        for joint, path, score, ret in zip(joints, paths, scores, rets)
    ]
