"""Who takes a turn, and what a pool whose replicas stop one by one records.

Two agent options keep a replica from taking more turns in an episode:
- `stop = replica`: a replica of an acting agent stops at its own final action (a ReAct worker that
  answered); the others go on. The agent's recorded action, which conditions test, is the final action
  once every replica has stopped, else the action the replicas still going took (`MIXED` when they
  differ, `INVALID` when one broke its contract): `until worker == answer` ends the loop when all stopped.
- `budget = N`: a replica's turns share N generated tokens (every try counts); each turn may generate
  min(its `max_tokens`, what is left), and a replica with nothing left takes no more turns.

A step whose replicas all stopped is skipped, as a routed step nobody was routed to is: its event is
not generated. So each event's active set is the replicas still taking turns (K varies per event).
"""

from __future__ import annotations

from collections.abc import Sequence

from srpo_dsl.lang.checks.declarations import AgentInfo
from srpo_dsl.runtime.actions import action_of, action_state
from srpo_dsl.runtime.episode import Episode, Member


def tokens_left(ep: Episode, agent: AgentInfo, replica: int, pending: int = 0) -> int:
    """The max_tokens of the replica's next sample, `pending` tokens of this turn already drawn
    (0: it takes no more turns)."""
    if (agent.name, replica) in ep.stopped:
        return 0
    return agent.max_tokens_left(ep.spent.get((agent.name, replica), 0) + pending)


def note_turn(ep: Episode, agent: AgentInfo, own: Sequence[Member], tries: Sequence[Member]) -> None:
    """After `agent`'s members `own` (and the invalid `tries` resampled for them) were committed: the
    tokens they spent, the replicas that stopped, and the action the agent records."""
    for m in [*own, *tries]:
        ep.spent[(agent.name, m.replica)] = ep.spent.get((agent.name, m.replica), 0) + len(
            m.response_token_ids
        )
    if not agent.actions:
        return
    if agent.stop == "pool":
        ep.state[agent.name] = action_state(own)
        return
    ep.stopped |= {(agent.name, m.replica) for m in own if action_of(m) == agent.final_action}
    going = [m for m in own if (agent.name, m.replica) not in ep.stopped]
    everyone = all((agent.name, r) in ep.stopped for r in range(1, agent.replicas + 1))
    ep.state[agent.name] = agent.final_action if everyone else action_state(going)
