"""Conversation agents (`observe = "TEMPLATE"`): each replica's turns in an episode are one token stream.

The first turn is the agent's prompt template, encoded as the first message (`ChatEncoder.first`: the
model's chat template, else BOS + text). Every later turn appends to the ids of the turn before (its
prompt, then the reply exactly as sampled): the `observe` template's rendering, encoded alone as the next
message (`ChatEncoder.then`). So the prompt of turn k + 1 begins with turn k's prompt and response ids,
which is what lets the update score a conversation's turns in one pass (`rl/objective/rows.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from srpo_dsl.backends.base import Backend, BackendError
from srpo_dsl.backends.chat import ChatEncoder
from srpo_dsl.lang.declarations import AgentInfo
from srpo_dsl.runtime.episode import Episode
from srpo_dsl.runtime.prompts import PromptRenderer


def chat_encoders(agents: Mapping[str, AgentInfo], backends: Mapping[str, Backend]) -> dict[str, ChatEncoder]:
    """The encoder of each policy a conversation agent uses; `BackendError` for a backend without one."""
    out: dict[str, ChatEncoder] = {}
    for a in agents.values():
        if a.observe is None or a.policy in out:
            continue
        backend = backends[a.policy]
        make = getattr(backend, "chat_encoder", None)
        if make is None:
            raise BackendError(
                f"agent `{a.name}` keeps a conversation (`observe`), which the `{backend.name}` backend "
                "of its policy cannot encode"
            )
        out[a.policy] = make()
    return out


def turn_prompt(
    ep: Episode,
    agent: AgentInfo,
    replica: int,
    context: Mapping[str, object],
    renderer: PromptRenderer,
    chats: Mapping[str, ChatEncoder],
    shuffle_seed: int,
) -> tuple[str, tuple[int, ...] | None]:
    """The text of a turn's prompt (or of its new message) and, for a conversation agent, the prompt's
    ids: the first turn's, or the conversation so far with the new message appended."""
    so_far = conversation_so_far(ep, agent, replica)
    if agent.observe is None or so_far is None:
        text = renderer.render(agent.prompt, context, shuffle_seed=shuffle_seed)
        return text, None if agent.observe is None else tuple(chats[agent.policy].first(text))
    text = renderer.render(agent.observe, context, shuffle_seed=shuffle_seed)
    return text, (*so_far, *chats[agent.policy].then(text, so_far))


def conversation_so_far(ep: Episode, agent: AgentInfo, replica: int) -> tuple[int, ...] | None:
    """The replica's conversation: its last turn's prompt and reply ids (None before its first turn, or for
    an agent that keeps none), read from the episode's events (a path's own: a fork shares them)."""
    if agent.observe is None:
        return None
    for event in reversed(ep.events):
        for m in event.members:
            if m.role == agent.name and m.replica == replica:
                return (*m.prompt_token_ids, *m.response_token_ids)
    return None


def conversation_prefix(ep: Episode, agent: AgentInfo, replica: int) -> int | None:
    """A conversation turn's `GenRequest.prefix`: the ids of its turns so far (0 on its first), None for
    an agent that keeps none."""
    return None if agent.observe is None else len(conversation_so_far(ep, agent, replica) or ())
