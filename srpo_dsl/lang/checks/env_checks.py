"""The checks of environments: their declarations, their steps, the conditions on their words and the
steps whose members they select (`parallel P by ENV`). The declaration pass holds an `EnvDeclarations`
and calls it for every environment's declaration; the flow pass holds an `EnvSteps` and calls it for
every environment's step, condition and `by ENV`.

    env tree = "tot.py:search"(timeout = 10) emits verdict(expand, solved), route(proposer)
    step tree                       # no `on`: reads no outputs (the first observation)
    parallel proposer by tree       # the replicas its last step selected
    step tree on proposer
    until tree == solved            # one of its words

An environment without `emits verdict(...)` returns `done` as a bool, and conditions test `done`.
"""

from __future__ import annotations

from typing import Protocol

from srpo_dsl.lang.checks.check_context import CheckContext, contract_name
from srpo_dsl.lang.checks.declarations import ENV_DONE, EnvInfo
from srpo_dsl.lang.checks.option_checks import check_code_binding
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import did_you_mean
from srpo_dsl.registries import CONTRACTS

# How messages write what an environment may emit: a contract that lists the words its steps return (a
# `testable` one), and one that selects replicas of a pool (a `selects` one); see `ContractSpec`.
ENV_WORDS, ENV_SELECTS = "verdict", "route"


class ContractChecks(Protocol):
    """What the environment checks use of the declaration pass: its context, its contract check."""

    ctx: CheckContext

    def check_contract(self, c: n.Contract) -> object: ...


class ActedTracking(Protocol):
    """What the environment checks use of the flow pass: its context, what may have acted by now."""

    ctx: CheckContext
    acted: set[str]

    def mark_acted(self, agent: str) -> None: ...


class EnvDeclarations:
    """The checks of environments' declarations, part of the declaration pass (through which they report
    and resolve Python code and contracts)."""

    def __init__(self, declarations: ContractChecks):
        self.decl = declarations
        self.ctx = declarations.ctx

    def check_env(self, env: n.Env) -> None:
        """`env NAME = "file.py:function"(timeout = 10, key = value, ...) [emits ...]`: the user's Python,
        resolved into `out.envs`."""
        kind = env.source.kind
        if isinstance(kind, n.Ident):
            self.ctx.error(
                "E090",
                f"an environment is the user's Python, not `{kind.name}`",
                kind.span,
                f'write `env {env.name.name} = "file.py:function"(key = value, ...)`',
            )
            return
        emitted = self.read_emits(env)
        bound = check_code_binding(self.ctx, env.source, kind, "env")
        if bound is not None and emitted is not None:
            words, selects = emitted
            self.ctx.out.envs[env.name.name] = EnvInfo(bound.kind, bound.options, bound.code, words, selects)

    def read_emits(self, env: n.Env) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(its words, the pools it selects) from `emits`; None after reporting what is wrong (E064)."""
        words: tuple[str, ...] = ()
        selects: list[str] = []
        ok = True
        for c in env.emits:
            spec = CONTRACTS.get(c.name.name) if isinstance(c.name, n.Ident) else None
            if spec is None or not (spec.testable or spec.selects):
                written = c.name.text if isinstance(c.name, n.Ref) else c.name.name
                self.ctx.error(
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
                name = contract_name(c)
                self.ctx.error(
                    "E064", f"`{name}` is listed twice: one `{name}(...)` lists every word", c.span
                )
                ok = False
            elif spec.testable:
                words = tuple(w.name for w in c.args)
            elif c.args and c.args[0].name in selects:
                self.ctx.error("E064", f"the pool `{c.args[0].name}` is selected twice", c.args[0].span)
                ok = False
            elif c.args:
                self.ctx.used.add(c.args[0].name)
                selects.append(c.args[0].name)
        return (words, tuple(selects)) if ok else None

    def contract_fails(self, c: n.Contract) -> bool:
        """Whether the contract's arguments are wrong (reported by the declaration pass: E031, E032, E012)."""
        before = len(self.ctx.out.diagnostics)
        self.decl.check_contract(c)
        return len(self.ctx.out.diagnostics) > before


class EnvSteps:
    """The checks of environments' steps, of the conditions on their words and of the steps whose members
    they select, part of the flow pass (through which they report and read what may have acted)."""

    def __init__(self, flow: ActedTracking):
        self.flow = flow
        self.ctx = flow.ctx

    def check_step(self, s: n.EnvStep, routed: set[str]) -> None:
        """`step ENV [on A, B]`: a declared environment, on agents that may have acted before it."""
        self.ctx.used.add(s.env.name)
        if s.env.name not in self.ctx.env_names:
            self.ctx.error(
                "E014",
                f"undefined environment `{s.env.name}`",
                s.env.span,
                did_you_mean(s.env.name, self.ctx.env_names),
            )
        for agent in s.on:
            if self.ctx.require_agent(agent) and agent.name not in self.flow.acted:
                self.ctx.error(
                    "E062",
                    f"unreachable: `{agent.name}` has no outputs before this step of `{s.env.name}`",
                    agent.span,
                    f"put a step of `{agent.name}` before it",
                )
        self.flow.mark_acted(s.env.name)
        routed.add(s.env.name)

    def check_router(self, s: n.EventStep, routed: set[str]) -> None:
        """`KIND P by ENV`: ENV selects replicas of P (E065) and steps before it in the same block (E066)."""
        assert s.by is not None
        env = s.by.name
        self.ctx.used.add(env)
        info = self.ctx.out.envs.get(env)
        if info is None:  # its declaration has errors, reported there
            return
        if s.agent.name not in info.selects:
            pools = ", ".join(f"`{p}`" for p in info.selects)
            what = f"it selects {pools}" if pools else "it selects none"
            self.ctx.error(
                "E065",
                f"`{env}` does not select replicas of `{s.agent.name}`: {what}",
                s.by.span,
                f"declare it: `env {env} = ... emits {ENV_SELECTS}({s.agent.name})`",
            )
        elif env not in routed:
            self.ctx.error(
                "E066",
                f"`{s.kind} {s.agent.name} by {env}` needs a `step {env}` before it, in its block or a block "
                "around it",
                s.span,
                f"the replicas that act are those the last step of `{env}` selected: step it first "
                f"(`step {env}` reads no outputs)",
            )

    def check_condition(self, c: n.Cond) -> None:
        """`ENV == WORD` (or `!=`): one of its declared words, else `done`, once it may have stepped."""
        self.ctx.used.add(c.agent.name)
        info = self.ctx.out.envs.get(c.agent.name)  # None: its declaration has errors, reported there
        words = info.words if info is not None else ()
        if words and c.word.name not in words:
            self.ctx.error(
                "E061",
                f"`{c.agent.name}` never returns `{c.word.name}` (its words: {', '.join(words)})",
                c.word.span,
                did_you_mean(c.word.name, words),
            )
        elif info is not None and not words and c.word.name != ENV_DONE:
            self.ctx.error(
                "E061",
                f"`{c.agent.name}` is an environment: a condition tests `{ENV_DONE}`, not `{c.word.name}`",
                c.word.span,
                f"write `{c.agent.name} {c.op} {ENV_DONE}`, or declare its words: "
                f"`emits {ENV_WORDS}({c.word.name}, ...)`",
            )
        elif c.agent.name not in self.flow.acted:
            self.ctx.error(
                "E062",
                f"unreachable: `{c.agent.name}` has not stepped before this condition",
                c.span,
                f"put `step {c.agent.name}` before it",
            )
