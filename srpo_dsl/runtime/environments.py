"""Environments: the user's Python that steps an episode (`env NAME = "file.py:function"(...)`).

At `step NAME on A, B` the executor calls `env(outputs, row, state, **options)`:

- `outputs`: {agent: [{role, replica, text, valid, value}, ...]}, the members of each named
  agent's last event (as `team_context` holds them; an agent that has not acted: `[]`);
- `row`: a copy of the task row;
- `state`: a dict created empty for each episode and each environment, kept across that
  episode's steps of the environment (the environment mutates it).

It returns `(observations, done)` or `(observations, done, reward)`: `observations` is
{agent: str} for declared agents, `done` a bool, `reward` a finite number. The environment's
recorded state (what `until ENV == done` tests) is `done` after a step that returned True, else
`running`. Unlike a tool's, an environment's failure is no observation: an exception, a time-out
or a wrong return stops the run with one line naming the user's file:line (`UserCodeError`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from srpo_dsl.lang.declarations import Binding
from srpo_dsl.lang.graph import ENV_DONE, ENV_RUNNING, EnvNode
from srpo_dsl.lang.pycode import ENV_OPTIONS
from srpo_dsl.runtime.episode import EnvProgress, Episode, Event, context_entry
from srpo_dsl.runtime.usercode import UserFunction, finite_number, load_function, shorten


@dataclass(frozen=True)
class EnvReply:
    """What one step of an environment returned, checked."""

    observations: Mapping[str, str]  # agent -> the text it observes
    done: bool
    reward: float


class UserEnv:
    """An environment of the workflow: its function imported once, `timeout` seconds per step."""

    def __init__(self, name: str, binding: Binding, agents: Sequence[str]):
        assert binding.code is not None
        self.name, self.agents = name, tuple(agents)
        self.passed = {k: v for k, v in binding.options.items() if k not in ENV_OPTIONS}
        self.fn: UserFunction = load_function(binding.code, binding.options["timeout"], tuple(self.passed))

    def step(self, ep: Episode, node: EnvNode, agents_of: Callable[[Event], tuple[str, ...]]) -> None:
        """Step the environment for `ep`; record its reply on the episode and on the last event of each
        agent it observes (`agents_of`: the agents of an event)."""
        outputs = {
            agent: [
                context_entry(m.role, m.replica, m.text, m.valid, m.parsed)
                for m in ep.last_output.get(agent, [])
            ]
            for agent in node.on
        }
        progress = ep.envs.setdefault(self.name, EnvProgress())
        where = f"task {shorten(ep.task.get('id'))}, step {progress.steps + 1}"
        value = self.fn(outputs, copy.deepcopy(ep.task), progress.state, **self.passed, about=lambda: where)
        reply = self.checked(value, where)
        progress.steps += 1
        progress.done = reply.done
        progress.reward += reply.reward
        ep.state[self.name] = ENV_DONE if reply.done else ENV_RUNNING
        for agent, text in reply.observations.items():
            observation = {"env": self.name, "agent": agent, "result": text}
            ep.observations.append(observation)
            for replica in sorted({m.replica for m in ep.last_output.get(agent, [])} or {1}):
                ep.observe(replica, observation)  # in `history`, for each of the agent's replicas
            last = next((e for e in reversed(ep.events) if agent in agents_of(e)), None)
            if last is not None:
                last.observations.append(observation)

    def checked(self, value: Any, where: str) -> EnvReply:
        """The reply, or `UserCodeError` at the function's `def` saying what is wrong with it."""
        if not isinstance(value, tuple) or len(value) not in (2, 3):
            raise self.fn.fail(
                f"returned {shorten(value)} on {where}: an environment returns (observations, done) "
                "or (observations, done, reward)"
            )
        observations, done, *rest = value
        if not isinstance(observations, Mapping):
            raise self.fn.fail(
                f"returned the observations {shorten(observations)} on {where}: a dict {{agent: str}}"
            )
        unknown = [k for k in observations if k not in self.agents]
        if unknown:
            raise self.fn.fail(
                f"returned observations for {shorten(unknown)} on {where}: "
                f"the agents are {', '.join(self.agents)}"
            )
        bad = {k: v for k, v in observations.items() if not isinstance(v, str)}
        if bad:
            raise self.fn.fail(
                f"returned the observations {shorten(bad)} on {where}: an observation is a str"
            )
        if not isinstance(done, bool):
            raise self.fn.fail(f"returned done = {shorten(done)} on {where}: `done` is a bool")
        reward = rest[0] if rest else 0.0
        if not finite_number(reward) or isinstance(reward, bool):
            raise self.fn.fail(
                f"returned the reward {shorten(reward)} on {where}: a reward is a finite number"
            )
        return EnvReply(dict(observations), done, float(reward))


def load_envs(envs: Mapping[str, Binding], agents: Sequence[str]) -> dict[str, UserEnv]:
    """Every environment of a workflow, its module imported (once per process)."""
    return {name: UserEnv(name, binding, agents) for name, binding in envs.items()}
