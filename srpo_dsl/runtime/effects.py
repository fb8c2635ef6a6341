"""What an event step does to its episode once its members are committed: one handler per effect.

The step table (`srpo_dsl.lang.syntax.steps`) lists each kind's effects by name; the executor runs their
handlers in that order, after the event is recorded and its outputs joined `team_context`. A step
kind with an effect of its own registers the handler here: `@EFFECTS.register("name")`.
"""

from __future__ import annotations

from collections.abc import Callable

from srpo_dsl.lang.compile.graph import EventNode
from srpo_dsl.lang.syntax.steps import RECORD, ROUTE
from srpo_dsl.registries import Registry
from srpo_dsl.runtime.episode import Episode, Member

INVALID = "INVALID"  # the recorded state of a verdict or route that broke its contract

# (the episode, the step's node, the members of its event: those that came back, in member order)
Effect = Callable[[Episode, EventNode, list[Member]], None]
EFFECTS: Registry[Effect] = Registry("step effect")


@EFFECTS.register(RECORD)
@EFFECTS.register(ROUTE)
def record(ep: Episode, node: EventNode, members: list[Member]) -> None:
    """The agent's decision (its first member's parsed value, or INVALID) is its state, which conditions
    and routed steps read: a verdict's word, a route's selection as a tuple (it is compared and iterated)."""
    first = members[0] if members else None
    value = first.parsed if first is not None and first.valid else INVALID
    ep.state[node.agent.name] = tuple(value) if isinstance(value, list) else value


@EFFECTS.register("feedback")
def feedback(ep: Episode, node: EventNode, members: list[Member]) -> None:
    """The members' texts join the memory's `feedback`, which later prompts see."""
    ep.feedback.extend(m.text for m in members)
