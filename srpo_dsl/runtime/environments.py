"""Environments: the user's Python that steps an episode (`env NAME = "file.py:function"(...)`).

At `step NAME on A, B` (or `step NAME`, reading no outputs) the executor calls
`env(outputs, row, state, **options)`:

- `outputs`: {agent: [{role, replica, text, valid, value, finish}, ...]}, the members of each named
  agent's last event (as `team_context` holds them, with how each turn ended; an agent that has not
  acted: `[]`);
- `row`: a copy of the task row;
- `state`: a dict created empty for each episode and each environment, kept across that
  episode's steps of the environment (the environment mutates it).

It returns `(observations, done[, reward[, key]])`: `observations` is {agent: str} for declared agents,
`done` a bool, `reward` a finite number or a mapping {NAME: its own reward, credit key: a member's
reward, ...} (`runtime.credit`). An environment declared with `emits verdict(W1, W2)` returns one of
its words instead of `done`; one declared with `emits route(POOL)` returns a fourth element,
{POOL: [replica, ...]}: the replicas of its next `parallel POOL by NAME` (empty: nobody acts). Every
environment may add one more element last, the state key (a str, or None for none): which state its
observations show, recorded on every event made until its next step (`Event.state_key`), which
`advantage = state` groups by. The
environment's recorded state (what conditions on it test) is its word, else `done` after a step that
returned True and `running` otherwise. Unlike a tool's, an environment's failure is no observation: an
exception, a time-out or a wrong return stops the run with one line naming the user's file:line
(`UserCodeError`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from srpo_dsl.lang.checks.declarations import ENV_DONE, ENV_RUNNING, EnvInfo
from srpo_dsl.lang.checks.env_checks import ENV_WORDS
from srpo_dsl.lang.checks.state_keys import return_lengths
from srpo_dsl.lang.compile.graph import EnvNode
from srpo_dsl.lang.usercode.pycode import ENV_OPTIONS
from srpo_dsl.limits import bounded
from srpo_dsl.runtime.credit import CreditError, parse_credit, rounds_taken
from srpo_dsl.runtime.episode import EnvProgress, EnvStepResult, Episode, Event, context_entry
from srpo_dsl.runtime.usercode import UserFunction, finite_number, load_function, seconds_option, shorten


@dataclass(frozen=True)
class EnvReply:
    """What one step of an environment returned, checked."""

    observations: Mapping[str, str]  # agent -> the text it observes
    result: EnvStepResult


class UserEnv:
    """An environment of the workflow: its function imported once, `timeout` seconds per step.
    `pools`: every declared agent -> its number of replicas."""

    def __init__(self, name: str, info: EnvInfo, pools: Mapping[str, int]):
        assert info.code is not None
        self.name, self.info, self.pools = name, info, dict(pools)
        self.passed = {k: v for k, v in info.options.items() if k not in ENV_OPTIONS}
        self.fn: UserFunction = load_function(info.code, seconds_option(info.options), tuple(self.passed))

    def step(self, ep: Episode, node: EnvNode, agents_of: Callable[[Event], tuple[str, ...]]) -> None:
        """Step the environment for `ep`; record its reply on the episode and on the last event of each
        agent it observes (`agents_of`: the agents of an event)."""
        outputs = {
            agent: [
                {**context_entry(m.role, m.replica, m.text, m.valid, m.parsed), "finish": m.finish}
                for m in ep.last_output.get(agent, [])
            ]
            for agent in node.on
        }
        progress = ep.envs.setdefault(self.name, EnvProgress(says_words=bool(self.info.words)))
        where = f"task {shorten(ep.task.get('id'))}, step {progress.steps + 1}"
        value = self.fn(outputs, copy.deepcopy(ep.task), progress.state, **self.passed, about=lambda: where)
        reply = self.checked(value, where, rounds_taken(ep.events))
        progress.log.append(reply.result)
        ep.state[self.name] = reply.result.word
        for agent, text in reply.observations.items():
            observation = {"env": self.name, "agent": agent, **bounded("result", text)}
            ep.observations.append(observation)
            acted = {m.replica for m in ep.last_output.get(agent, [])}
            for replica in sorted(acted) or range(1, self.pools[agent] + 1):  # in `history`, per replica
                ep.observe(replica, observation)
            last = next((e for e in reversed(ep.events) if agent in agents_of(e)), None)
            if last is not None:
                last.observations.append(observation)

    # ---- what it returned -------------------------------------------------------------------------
    def checked(self, value: object, where: str, rounds: Mapping[str, int]) -> EnvReply:
        """The reply, or `UserCodeError` at the function's `def` saying what is wrong with it (`rounds`:
        each role -> the rounds it took so far, which credit keys `ROLE@N` may name)."""
        if not isinstance(value, tuple) or len(value) not in self._lengths():
            raise self.fn.fail(
                f"returned {shorten(value)} on {where}: an environment returns {self._shape()}"
            )
        observations, said, *rest = value
        observed = self._observations(observations, where)
        word = self._word(said, where)
        reward, credit = self._reward(rest[0] if rest else 0.0, where, rounds)
        selected = self._selection(rest[1], where) if self.info.selects else {}
        keyed = len(value) == self._lengths()[-1]
        key = self._key(value[-1], where) if keyed else None
        return EnvReply(observed, EnvStepResult(word, reward, credit, selected, key))

    def _lengths(self) -> tuple[int, ...]:
        """The lengths of the tuple it may return, the last one with a state key."""
        return return_lengths(bool(self.info.selects))

    def _shape(self) -> str:
        said = "WORD" if self.info.words else "done"
        if self.info.selects:
            return (
                f"(observations, {said}, reward, {{pool: [replica, ...]}}[, key]) "
                f"(`{self.name}` selects replicas)"
            )
        return (
            f"(observations, {said}), (observations, {said}, reward) or (observations, {said}, reward, key)"
        )

    def _key(self, key: object, where: str) -> str | None:
        """The state key: a str naming the state its observations show, or None for none."""
        if key is not None and not isinstance(key, str):
            raise self.fn.fail(
                f"returned the state key {shorten(key)} on {where}: a state key is a str (or None), e.g. "
                "the position as text, f'{row},{col}'"
            )
        return key

    def _observations(self, observations: object, where: str) -> dict[str, str]:
        if not isinstance(observations, Mapping):
            raise self.fn.fail(
                f"returned the observations {shorten(observations)} on {where}: a dict {{agent: str}}"
            )
        unknown = [k for k in observations if k not in self.pools]
        if unknown:
            raise self.fn.fail(
                f"returned observations for {shorten(unknown)} on {where}: "
                f"the agents are {', '.join(self.pools)}"
            )
        bad = {k: v for k, v in observations.items() if not isinstance(v, str)}
        if bad:
            raise self.fn.fail(
                f"returned the observations {shorten(bad)} on {where}: an observation is a str"
            )
        return dict(observations)

    def _word(self, said: object, where: str) -> str:
        """The recorded state: a declared word, else `done`/`running` from a bool."""
        words = self.info.words
        if words:
            if not isinstance(said, str) or said not in words:
                raise self.fn.fail(
                    f"returned the word {shorten(said)} on {where}: `{self.name}` returns one of its words "
                    f"({', '.join(words)})"
                )
            return said
        if not isinstance(said, bool):
            declare = (
                f" (to return words, declare them: `emits {ENV_WORDS}(...)`)" if isinstance(said, str) else ""
            )
            raise self.fn.fail(f"returned done = {shorten(said)} on {where}: `done` is a bool{declare}")
        return ENV_DONE if said else ENV_RUNNING

    def _reward(
        self, reward: object, where: str, rounds: Mapping[str, int]
    ) -> tuple[float, dict[str, float]]:
        """(the step's own reward, its credit keys): a number, or {NAME: number, KEY: number, ...}."""
        if isinstance(reward, Mapping):
            return self._credit(reward, where, rounds)
        if not finite_number(reward) or isinstance(reward, bool):
            raise self.fn.fail(
                f"returned the reward {shorten(reward)} on {where}: a reward is a finite number "
                f"(or {{'{self.name}': number, 'ROLE': number, ...}})"
            )
        return float(reward), {}

    def _credit(
        self, reward: Mapping[object, object], where: str, rounds: Mapping[str, int]
    ) -> tuple[float, dict[str, float]]:
        own = reward.get(self.name)
        if not finite_number(own) or isinstance(own, bool):
            raise self.fn.fail(
                f"returned the reward {shorten(dict(reward))} on {where}: a mapping holds the step's own "
                f"reward under `{self.name}` (a finite number), and credit keys ROLE, ROLE#R, ROLE@N"
            )
        try:
            credit = parse_credit({k: v for k, v in reward.items() if k != self.name}, self.pools, rounds)
        except CreditError as err:
            raise self.fn.fail(f"returned {err.what} on {where}: {err.why}") from None
        return float(own), credit

    def _selection(self, selection: object, where: str) -> dict[str, tuple[int, ...]]:
        """{pool: replicas} for every pool the environment selects (replicas distinct, 1..N)."""
        pools = self.info.selects
        if not isinstance(selection, Mapping) or set(selection) != set(pools):
            raise self.fn.fail(
                f"returned the selection {shorten(selection)} on {where}: `{self.name}` selects "
                f"{{{', '.join(f'{p!r}: [replica, ...]' for p in pools)}}} (an empty list: nobody acts)"
            )
        out = {}
        for pool in pools:
            chosen, size = selection[pool], self.pools[pool]
            ok = isinstance(chosen, (list, tuple)) and all(
                isinstance(r, int) and not isinstance(r, bool) and 1 <= r <= size for r in chosen
            )
            if not ok or len(set(chosen)) != len(chosen):
                raise self.fn.fail(
                    f"returned the replicas {shorten(chosen)} of `{pool}` on {where}: "
                    f"a list of distinct replica numbers in 1..{size}"
                )
            out[pool] = tuple(chosen)
        return out


def load_envs(envs: Mapping[str, EnvInfo], pools: Mapping[str, int]) -> dict[str, UserEnv]:
    """Every environment of a workflow, its module imported (once per process)."""
    return {name: UserEnv(name, info, pools) for name, info in envs.items()}
