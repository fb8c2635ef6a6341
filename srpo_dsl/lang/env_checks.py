"""The checks of environments: their declarations, their steps, the conditions on their words and the
steps whose members they select (`parallel P by ENV`). The checker (`checker._Checker`) holds one and
calls it for every environment's declaration, step, condition and `by ENV`.

    env tree = "tot.py:search"(timeout = 10) emits verdict(expand, solved), route(proposer)
    step tree                       # no `on`: reads no outputs (the first observation)
    parallel proposer by tree       # the replicas its last step selected
    step tree on proposer
    until tree == solved            # one of its words

An environment without `emits verdict(...)` returns `done` as a bool, and conditions test `done`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from srpo_dsl.lang import nodes as n
from srpo_dsl.lang.declarations import EnvInfo
from srpo_dsl.lang.graph import ENV_DONE
from srpo_dsl.lang.messages import did_you_mean
from srpo_dsl.registries import CONTRACTS

if TYPE_CHECKING:
    from srpo_dsl.lang.checker import _Checker

# How messages write what an environment may emit: a contract that lists the words its steps return (a
# `testable` one), and one that selects replicas of a pool (a `selects` one); see `ContractSpec`.
ENV_WORDS, ENV_SELECTS = "verdict", "route"


class EnvChecks:
    """Environment checks, reporting through the checker they are part of (its diagnostics, the names it
    has seen used, the agents and environments that may have acted before the step being checked)."""

    def __init__(self, checker: _Checker):
        self.c = checker

    # ---- the declaration -------------------------------------------------------------------------
    def declare(self, env: n.Env) -> None:
        """`env NAME = "file.py:function"(timeout = 10, key = value, ...) [emits ...]`: the user's Python."""
        kind = env.source.kind
        if isinstance(kind, n.Ident):
            self.c.error(
                "E090",
                f"an environment is the user's Python, not `{kind.name}`",
                kind.span,
                f'write `env {env.name.name} = "file.py:function"(key = value, ...)`',
            )
            return
        emitted = self.emits(env)
        bound = self.c.code_binding(env.source, kind, "env")
        if bound is not None and emitted is not None:
            words, selects = emitted
            self.c.out.envs[env.name.name] = EnvInfo(bound.kind, bound.options, bound.code, words, selects)

    def emits(self, env: n.Env) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(its words, the pools it selects) from `emits`; None after reporting what is wrong (E064)."""
        words: tuple[str, ...] = ()
        selects: list[str] = []
        ok = True
        for c in env.emits:
            spec = CONTRACTS.get(c.name.name) if isinstance(c.name, n.Ident) else None
            if spec is None or not (spec.testable or spec.selects):
                written = c.name.text if isinstance(c.name, n.Ref) else c.name.name
                self.c.error(
                    "E064",
                    f"an environment emits `{ENV_WORDS}(...)` (the words its steps return) and "
                    f"`{ENV_SELECTS}(POOL)` (a pool whose replicas it selects), not `{written}`",
                    c.name.span,
                    f"e.g. `emits {ENV_WORDS}(expand, solved), {ENV_SELECTS}(proposer)`",
                )
                ok = False
            elif self.contract_fails(c):  # its arguments: words once each, one declared pool
                ok = False
            elif spec.testable and words:  # one list of words: the words its steps return
                name = c.name.name
                self.c.error("E064", f"`{name}` is listed twice: one `{name}(...)` lists every word", c.span)
                ok = False
            elif spec.testable:
                words = tuple(w.name for w in c.args)
            elif c.args and c.args[0].name in selects:
                self.c.error("E064", f"the pool `{c.args[0].name}` is selected twice", c.args[0].span)
                ok = False
            elif c.args:
                self.c.used.add(c.args[0].name)
                selects.append(c.args[0].name)
        return (words, tuple(selects)) if ok else None

    def contract_fails(self, c: n.Contract) -> bool:
        """Whether the contract's arguments are wrong (reported by the checker: E031, E032, E012)."""
        before = len(self.c.out.diagnostics)
        self.c.contract(c)
        return len(self.c.out.diagnostics) > before

    # ---- steps -----------------------------------------------------------------------------------
    def step(self, s: n.EnvStep, routed: set[str]) -> None:
        """`step ENV [on A, B]`: a declared environment, on agents that may have acted before it."""
        self.c.used.add(s.env.name)
        if s.env.name not in self.c.env_names:
            self.c.error(
                "E014",
                f"undefined environment `{s.env.name}`",
                s.env.span,
                did_you_mean(s.env.name, self.c.env_names),
            )
        for agent in s.on:
            if self.c.known_agent(agent) and agent.name not in self.c.acted:
                self.c.error(
                    "E062",
                    f"unreachable: `{agent.name}` has no outputs before this step of `{s.env.name}`",
                    agent.span,
                    f"put a step of `{agent.name}` before it",
                )
        self.c.act(s.env.name)
        routed.add(s.env.name)

    def router(self, s: n.EventStep, routed: set[str]) -> None:
        """`KIND P by ENV`: ENV selects replicas of P (E065) and steps before it in the same block (E066)."""
        assert s.by is not None
        env = s.by.name
        self.c.used.add(env)
        info = self.c.out.envs.get(env)
        if info is None:  # its declaration has errors, reported there
            return
        if s.agent.name not in info.selects:
            pools = ", ".join(f"`{p}`" for p in info.selects)
            what = f"it selects {pools}" if pools else "it selects none"
            self.c.error(
                "E065",
                f"`{env}` does not select replicas of `{s.agent.name}`: {what}",
                s.by.span,
                f"declare it: `env {env} = ... emits {ENV_SELECTS}({s.agent.name})`",
            )
        elif env not in routed:
            self.c.error(
                "E066",
                f"`{s.kind} {s.agent.name} by {env}` needs a `step {env}` before it, in its block or a block "
                "around it",
                s.span,
                f"the replicas that act are those the last step of `{env}` selected: step it first "
                f"(`step {env}` reads no outputs)",
            )

    def cond(self, c: n.Cond) -> None:
        """`ENV == WORD` (or `!=`): one of its declared words, else `done`, once it may have stepped."""
        self.c.used.add(c.agent.name)
        info = self.c.out.envs.get(c.agent.name)  # None: its declaration has errors, reported there
        words = info.words if info is not None else ()
        if words and c.word.name not in words:
            self.c.error(
                "E061",
                f"`{c.agent.name}` never returns `{c.word.name}` (its words: {', '.join(words)})",
                c.word.span,
                did_you_mean(c.word.name, words),
            )
        elif info is not None and not words and c.word.name != ENV_DONE:
            self.c.error(
                "E061",
                f"`{c.agent.name}` is an environment: a condition tests `{ENV_DONE}`, not `{c.word.name}`",
                c.word.span,
                f"write `{c.agent.name} {c.op} {ENV_DONE}`, or declare its words: "
                f"`emits {ENV_WORDS}({c.word.name}, ...)`",
            )
        elif c.agent.name not in self.c.acted:
            self.c.error(
                "E062",
                f"unreachable: `{c.agent.name}` has not stepped before this condition",
                c.span,
                f"put `step {c.agent.name}` before it",
            )
