"""The checks of environments: their declarations, their steps, the conditions on their words and the
steps whose members they select (`parallel P by ENV`). A part of the checker (`checker._Checker`
inherits it), in a module of its own.

    env tree = "tot.py:search"(timeout = 10) emits verdict(expand, solved), route(proposer)
    step tree                       # no `on`: reads no outputs (the first observation)
    parallel proposer by tree       # the replicas its last step selected
    step tree on proposer
    until tree == solved            # one of its words

An environment without `emits verdict(...)` returns `done` as a bool, and conditions test `done`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from srpo_dsl.lang import nodes as n
from srpo_dsl.lang.declarations import Binding, EnvInfo
from srpo_dsl.lang.errors import Span, did_you_mean
from srpo_dsl.lang.graph import ENV_DONE
from srpo_dsl.lang.schema import ContractSpec

if TYPE_CHECKING:
    from srpo_dsl.lang.checker import Checked

# What an environment may emit: the contract that lists its words, the one that names a pool it selects.
ENV_WORDS, ENV_SELECTS = "verdict", "route"


class EnvChecks:
    """Environment checks; the checker provides the state and helpers declared here."""

    env_names: list[str]
    used: set[str]
    acted: set[str]
    out: Checked  # its `envs` are filled here

    def error(self, code: str, message: str, span: Span, hint: str | None = None) -> None: ...
    def act(self, agent: str) -> None: ...
    def known_agent(self, ident: n.Ident) -> bool: ...
    def contract(self, c: n.Contract) -> ContractSpec | None: ...
    def code_binding(self, call: n.Call, ref: n.Ref, what: str) -> Binding | None: ...

    # ---- the declaration -------------------------------------------------------------------------
    def env(self, env: n.Env) -> None:
        """`env NAME = "file.py:function"(timeout = 10, key = value, ...) [emits ...]`: the user's Python."""
        kind = env.source.kind
        if isinstance(kind, n.Ident):
            self.error(
                "E090",
                f"an environment is the user's Python, not `{kind.name}`",
                kind.span,
                f'write `env {env.name.name} = "file.py:function"(key = value, ...)`',
            )
            return
        emitted = self.env_emits(env)
        bound = self.code_binding(env.source, kind, "env")
        if bound is not None and emitted is not None:
            words, selects = emitted
            self.out.envs[env.name.name] = EnvInfo(bound.kind, bound.options, bound.code, words, selects)

    def env_emits(self, env: n.Env) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(its words, the pools it selects) from `emits`; None after reporting what is wrong (E064)."""
        words: tuple[str, ...] = ()
        selects: list[str] = []
        ok = True
        for c in env.emits:
            name = c.name.name if isinstance(c.name, n.Ident) else None
            if name not in (ENV_WORDS, ENV_SELECTS):
                written = c.name.text if isinstance(c.name, n.Ref) else name
                self.error(
                    "E064",
                    f"an environment emits `{ENV_WORDS}(...)` (the words its steps return) and "
                    f"`{ENV_SELECTS}(POOL)` (a pool whose replicas it selects), not `{written}`",
                    c.name.span,
                    f"e.g. `emits {ENV_WORDS}(expand, solved), {ENV_SELECTS}(proposer)`",
                )
                ok = False
            elif self.reports(self.contract, c):  # its arguments: words once each, one declared pool
                ok = False
            elif name == ENV_WORDS and words:
                self.error(
                    "E064", f"`{ENV_WORDS}` is listed twice: one `{ENV_WORDS}(...)` lists every word", c.span
                )
                ok = False
            elif name == ENV_WORDS:
                words = tuple(w.name for w in c.args)
            elif c.args and c.args[0].name in selects:
                self.error("E064", f"the pool `{c.args[0].name}` is selected twice", c.args[0].span)
                ok = False
            elif c.args:
                self.used.add(c.args[0].name)
                selects.append(c.args[0].name)
        return (words, tuple(selects)) if ok else None

    def reports(self, check: Callable[[n.Contract], object], contract: n.Contract) -> bool:
        """Whether `check(contract)` reported an error."""
        before = len(self.out.diagnostics)
        check(contract)
        return len(self.out.diagnostics) > before

    # ---- steps -----------------------------------------------------------------------------------
    def visit_env(self, s: n.EnvStep, in_loop: bool, routed: set[str]) -> None:
        """`step ENV [on A, B]`: a declared environment, on agents that may have acted before it."""
        self.used.add(s.env.name)
        if s.env.name not in self.env_names:
            self.error(
                "E014",
                f"undefined environment `{s.env.name}`",
                s.env.span,
                did_you_mean(s.env.name, self.env_names),
            )
        for agent in s.on:
            if self.known_agent(agent) and agent.name not in self.acted:
                self.error(
                    "E062",
                    f"unreachable: `{agent.name}` has no outputs before this step of `{s.env.name}`",
                    agent.span,
                    f"put a step of `{agent.name}` before it",
                )
        self.act(s.env.name)
        routed.add(s.env.name)

    def env_router(self, s: n.EventStep, routed: set[str]) -> None:
        """`KIND P by ENV`: ENV selects replicas of P (E065) and steps before it in the same block (E066)."""
        assert s.by is not None
        env = s.by.name
        self.used.add(env)
        info = self.out.envs.get(env)
        if info is None:  # its declaration has errors, reported there
            return
        if s.agent.name not in info.selects:
            pools = ", ".join(f"`{p}`" for p in info.selects)
            what = f"it selects {pools}" if pools else "it selects none"
            self.error(
                "E065",
                f"`{env}` does not select replicas of `{s.agent.name}`: {what}",
                s.by.span,
                f"declare it: `env {env} = ... emits {ENV_SELECTS}({s.agent.name})`",
            )
        elif env not in routed:
            self.error(
                "E066",
                f"`{s.kind} {s.agent.name} by {env}` needs a `step {env}` before it, in its block or a block "
                "around it",
                s.span,
                f"the replicas that act are those the last step of `{env}` selected: step it first "
                f"(`step {env}` reads no outputs)",
            )

    def env_cond(self, c: n.Cond) -> None:
        """`ENV == WORD` (or `!=`): one of its declared words, else `done`, once it may have stepped."""
        self.used.add(c.agent.name)
        info = self.out.envs.get(c.agent.name)  # None: its declaration has errors, reported there
        words = info.words if info is not None else ()
        if words and c.word.name not in words:
            self.error(
                "E061",
                f"`{c.agent.name}` never returns `{c.word.name}` (its words: {', '.join(words)})",
                c.word.span,
                did_you_mean(c.word.name, words),
            )
        elif info is not None and not words and c.word.name != ENV_DONE:
            self.error(
                "E061",
                f"`{c.agent.name}` is an environment: a condition tests `{ENV_DONE}`, not `{c.word.name}`",
                c.word.span,
                f"write `{c.agent.name} {c.op} {ENV_DONE}`, or declare its words: "
                f"`emits {ENV_WORDS}({c.word.name}, ...)`",
            )
        elif c.agent.name not in self.acted:
            self.error(
                "E062",
                f"unreachable: `{c.agent.name}` has not stepped before this condition",
                c.span,
                f"put `step {c.agent.name}` before it",
            )
