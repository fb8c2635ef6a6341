"""What an acting agent's outputs mean to the episode (an agent that decides its own turns).

An acting contract (`emits act(search, answer)`, or a Python parser that declares its actions) parses
an output into `{"action": KIND, "value": ...}`. From that:
- a step may narrow the actions (`act researcher only answer`): another action is an invalid output;
- the agent's recorded state, which conditions test (`until researcher == answer`), is the action
  every member of its last event took (an invalid member, or members that disagree, record INVALID
  or MIXED, which no action equals);
- a tool called on the agent serves only the members whose action is the tool's name;
- its answer, when it is the rewarded agent, is the value of its last output if that output took
  the final action (the last one its contract lists); otherwise there is no answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from srpo_dsl.lang.checks.declarations import AgentInfo
from srpo_dsl.runtime.effects import INVALID
from srpo_dsl.runtime.episode import Member
from srpo_dsl.runtime.parsers import Parsed

MIXED = "MIXED"  # the recorded state of an event whose members took different actions


def allowed(parsed: Parsed, actions: Sequence[str]) -> Parsed:
    """`parsed`, or invalid when the step's agent acts (`actions`: those the step allows) and the output
    took none of them. An agent that does not act has no actions: any valid value is its own (a dict
    without "action" too), never an action choice."""
    if not actions or not parsed.valid:
        return parsed
    taken = parsed.value.get("action") if isinstance(parsed.value, dict) else None
    if taken in actions:
        return parsed
    why = f"action `{taken}` is not allowed here" if taken is not None else "the output takes no action"
    return Parsed(False, None, f"{why} (only {', '.join(actions)})")


def action_of(member: Member) -> str | None:
    """The action a valid member took; None for an invalid one."""
    value = member.parsed
    return value.get("action") if member.valid and isinstance(value, dict) else None


def finish_state(members: Sequence[Member]) -> str:
    """How an event's turn ended for `AGENT.finish` (`choices.FINISH_REASONS`): `length` if any member was cut
    at its token limit, else `stop` if any ended at a stop string, else `eos`; INVALID with no member."""
    finishes = {m.finish for m in members}
    return next((f for f in ("length", "stop", "eos") if f in finishes), INVALID)


def action_state(members: Sequence[Member]) -> str:
    """The action all members took: what conditions on the agent compare with."""
    taken = {action_of(m) for m in members}
    actions = {a for a in taken if a is not None}
    if not members or len(actions) < len(taken):  # one invalid member, or none at all
        return INVALID
    return actions.pop() if len(actions) == 1 else MIXED


def asked(members: Sequence[Member], tool: str) -> list[tuple[int, str]]:
    """(replica, query) of each call of each member whose action is `tool`, in member order, then in the
    order of its calls (an agent with `calls = N` may make several in one output: its value is their list)."""
    out = []
    for m in members:
        if action_of(m) == tool:
            value = action_value(m)
            out += [(m.replica, str(q)) for q in (value if isinstance(value, list) else [value])]
    return out


def final_answer(agent: AgentInfo, last: Member | None) -> object:
    """The rewarded agent's answer: its last output's value if that took the final action."""
    if last is None or action_of(last) != agent.final_action:
        return None
    return action_value(last)


def action_value(member: Member) -> object:
    """The value of the action a member took (`{"action": KIND, "value": ...}`: `action_of` is not None)."""
    parsed = member.parsed
    assert isinstance(parsed, dict), "a member that took an action parsed to a dict"
    return parsed["value"]
