"""Conversation agents (`observe = "TEMPLATE"`): each replica's turns in an episode are one token stream.

The first turn is the agent's prompt template, encoded as the first message (`ChatEncoder.first`: the
model's chat template, else BOS + text), after the rendered `system` template as the system message when
the agent has one (an agent with one, conversation or not, is encoded here, never by its backend).
Every later turn appends to the ids of the turn before (its prompt, then the reply exactly as sampled):
the `observe` template's rendering, encoded alone as the next message (`ChatEncoder.then`). So the
prompt of turn k + 1 begins with turn k's prompt and response ids, which is what lets the update score
a conversation's turns in one pass (`rl/objective/rows.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from srpo_dsl.backends.base import Backend, BackendError, ChatEncoder
from srpo_dsl.lang.checks.declarations import AgentInfo, PolicyInfo
from srpo_dsl.runtime.actions import action_of
from srpo_dsl.runtime.episode import Episode, Member
from srpo_dsl.runtime.prompts import PromptRenderer


def chat_encoders(agents: Mapping[str, AgentInfo], backends: Mapping[str, Backend]) -> dict[str, ChatEncoder]:
    """The encoder of each policy a conversation agent or an agent with a system message uses;
    `BackendError` for a backend without one, or a system message for a model without a chat template."""
    out: dict[str, ChatEncoder] = {}
    for a in agents.values():
        if not keeps_messages(a):
            continue
        if a.policy not in out:
            backend = backends[a.policy]
            make = getattr(backend, "chat_encoder", None)
            if make is None:
                raise BackendError(
                    f"agent `{a.name}` keeps a conversation (`observe`) or a system message, which the "
                    f"`{backend.name}` backend of its policy cannot encode"
                )
            out[a.policy] = make()
        if a.observe is not None:  # a template that rewrites earlier turns: refused before any turn
            out[a.policy].appendable()
            if a.tool_format is not None:
                out[a.policy].appendable("tool")
        if (a.system is not None or a.tools) and not out[a.policy].templated:
            what = "a system message (`system`)" if a.system is not None else "tools (`tool_format`)"
            raise BackendError(
                f"agent `{a.name}` has {what}, which needs a chat template: "
                f"the model of policy `{a.policy}` has none (or its chat template is turned off)"
            )
    return out


def use_chat_templates(policies: Mapping[str, PolicyInfo], backends: Mapping[str, Backend]) -> None:
    """Each policy's own `chat_template` as its backend's tokenizer's, so every render of the policy's prompts
    (`apply_chat_template`: one-message prompts, system messages, conversations) uses it; `BackendError` for
    a backend without a tokenizer, or one backend given two templates."""
    given: dict[int, tuple[str, str]] = {}
    for name, policy in policies.items():
        if policy.chat_template is None:
            continue
        backend = backends[name]
        first, text = given.setdefault(id(backend), (name, policy.chat_template))
        if text != policy.chat_template:
            raise BackendError(
                f"policies `{first}` and `{name}` share one backend but give it different chat templates"
            )
        tokenizer = getattr(backend, "tokenizer", None)
        if tokenizer is None:
            raise BackendError(
                f"policy `{name}` gives a chat template (`chat_template`), which its `{backend.name}` "
                "backend cannot use: it has no tokenizer"
            )
        tokenizer.chat_template = policy.chat_template
        if hasattr(backend, "use_chat_template"):  # on even where the model has no template of its own
            backend.use_chat_template = True


def keeps_messages(agent: AgentInfo) -> bool:
    """Whether the executor encodes the agent's prompts itself (as messages) rather than its backend."""
    return agent.observe is not None or agent.system is not None or bool(agent.tools)


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
        if not keeps_messages(agent):
            return text, None
        system = None if agent.system is None else renderer.render(agent.system, context, shuffle_seed)
        tools = [json.loads(t) for t in agent.tools]
        return text, tuple(chats[agent.policy].first(text, system, tools))
    text = renderer.render(agent.observe, context, shuffle_seed=shuffle_seed)
    return text, (*so_far, *chats[agent.policy].then(text, so_far, message_role(ep, agent, replica)))


def message_role(ep: Episode, agent: AgentInfo, replica: int) -> str:
    """The role of a conversation's next message: `tool` after a native tool call (a policy with
    `tool_format` whose last turn called a tool: the message is its result), else `user`."""
    last = last_member(ep, agent, replica)
    called = last is not None and agent.tool_format is not None and action_of(last) in agent.actions[:-1]
    return "tool" if called else "user"


def last_member(ep: Episode, agent: AgentInfo, replica: int) -> Member | None:
    """The replica's last output in the episode (a path's own: a fork shares its events)."""
    for event in reversed(ep.events):
        for m in event.members:
            if m.role == agent.name and m.replica == replica:
                return m
    return None


def conversation_so_far(ep: Episode, agent: AgentInfo, replica: int) -> tuple[int, ...] | None:
    """The replica's conversation: its last turn's prompt and reply ids (None before its first turn, or for
    an agent that keeps none), read from the episode's events (a path's own: a fork shares them)."""
    last = None if agent.observe is None else last_member(ep, agent, replica)
    return None if last is None else (*last.prompt_token_ids, *last.response_token_ids)


def conversation_prefix(ep: Episode, agent: AgentInfo, replica: int) -> int | None:
    """A conversation turn's `GenRequest.prefix`: the ids of its turns so far (0 on its first), None for
    an agent that keeps none."""
    return None if agent.observe is None else len(conversation_so_far(ep, agent, replica) or ())
