"""A rollout worker's engines take their weights right before each generation call.

    refresh = Refresh(engines, inbox)             # inbox: `newest`; None: `scheduled`
    backends = fresh_engines(engines, refresh)    # what the worker's executor generates with
    refresh.offer(weights)                        # a step's version, from `Inbox.next_step`
    executor.run(...)                             # every generate call loads the newest version first

The executor makes a call's members right after the call returns, reading the engine's `version`
(each member's `policy_version`); an engine's weights change only right before its own call, so each
member records the version that generated it, whatever arrived meanwhile. With `newest`, the
versions that arrive during a step are taken at the next call: one executor round, or a round's
retries, so an episode's later events may carry newer versions than its first. Policies sharing an
engine (adapters on one base) share one wrapped engine, as the executor groups calls by engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from srpo_dsl.backends.base import GenRequest, GenResult, RolloutEngine
from srpo_dsl.rl.transport.inbox import Inbox
from srpo_dsl.rl.transport.remote_weights import Weights, load_engine


class Refresh:
    """The newest version a worker holds; each trained engine loads it before its next generation call."""

    def __init__(self, engines: Mapping[str, RolloutEngine], inbox: Inbox | None):
        self.engines = engines  # policy -> engine (policies on one base: one engine)
        self.inbox = inbox  # None: only the versions `offer`ed (each step's)
        self.held: Weights | None = None
        self.loaded: dict[int, int] = {}  # id(engine) -> the version it loaded (none yet: its own weights)

    def offer(self, weights: Weights | None) -> None:
        """`weights` (None: nothing new) becomes the version the engines load before their next call."""
        if weights is not None:
            self.held = weights

    def before(self, engine: RolloutEngine) -> None:
        """Right before `engine` generates: the newest version received (`newest`), loaded unless it has
        it. Frozen engines are in no version: they never load."""
        if self.inbox is not None:
            self.offer(self.inbox.latest())
        weights = self.held
        if weights is None or self.loaded.get(id(engine), -1) >= weights.version:
            return
        for owner in weights.flats:
            if self.engines[owner] is engine:
                load_engine(engine, weights, owner)
        self.loaded[id(engine)] = weights.version


class FreshEngine:
    """A rollout engine that loads the newest version held (`Refresh`) before each `generate`; all else is
    the engine's."""

    def __init__(self, engine: RolloutEngine, refresh: Refresh):
        self.engine, self.refresh = engine, refresh

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def version(self) -> int:
        return self.engine.version

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        self.refresh.before(self.engine)
        return self.engine.generate(requests, seed=seed)

    def __getattr__(self, name: str) -> Any:  # chat_encoder, tokenizer, ...: the engine's own
        if name == "engine":  # not set yet (an object being built or unpickled)
            raise AttributeError(name)
        return getattr(self.engine, name)


def fresh_engines(engines: Mapping[str, RolloutEngine], refresh: Refresh) -> dict[str, FreshEngine]:
    """Each policy's engine wrapped; policies sharing an engine share its wrapper."""
    wrapped: dict[int, FreshEngine] = {}
    for engine in engines.values():
        wrapped.setdefault(id(engine), FreshEngine(engine, refresh))
    return {name: wrapped[id(engine)] for name, engine in engines.items()}
