"""The flow pass: the steps of a workflow walked in order (a `StepVisitor`), each checked against the
declarations the declaration pass resolved and against what may have acted before it.

Two things travel along the walk. `FlowChecks.acted` holds the agents and environments that may have
acted before the step being checked: a condition, a tool call or an environment's `on` reads what they
produced (E062). `routed`, one set per block, holds the routers that recorded a choice earlier in the
block, which `KIND P by R` reads (E044; an environment's step counts in the blocks inside too).
"""

from __future__ import annotations

from srpo_dsl.choices import FINISH, FINISH_REASONS
from srpo_dsl.lang.checks.branches import check_branch
from srpo_dsl.lang.checks.check_context import CheckContext
from srpo_dsl.lang.checks.env_checks import EnvSteps
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import did_you_mean
from srpo_dsl.lang.syntax.steps import FORMS, STEP_KINDS, StepKind, deciding, routers, takes
from srpo_dsl.registries import CONTRACTS

_CONTRACT_ARGS = {"none": "", "pool": "(POOL)", "words": "(...)", "tag": "(NAME)"}


def _contract_form(name: str) -> str:
    """How a contract is written, e.g. `route(POOL)`."""
    spec = CONTRACTS.get(name)
    return f"`{name}{_CONTRACT_ARGS.get(spec.args, '') if spec else ''}`"


class _IdleWays(n.StepVisitor[[], tuple[bool, bool]]):
    """Whether steps can be passed through, and whether a `break` can be taken, without a step that
    acts (an event, a tool call or an environment step)."""

    def block(self, steps: tuple[n.Step, ...]) -> tuple[bool, bool]:
        breaks = False
        for s in steps:
            passes, s_breaks = self.visit(s)
            breaks = breaks or s_breaks
            if not passes:
                return False, breaks
        return True, breaks

    def visit_event(self, step: n.EventStep) -> tuple[bool, bool]:
        return False, False

    def visit_call(self, step: n.CallTool) -> tuple[bool, bool]:
        return False, False

    def visit_env(self, step: n.EnvStep) -> tuple[bool, bool]:
        return False, False

    def visit_break(self, step: n.Break) -> tuple[bool, bool]:
        return True, True

    def visit_if(self, step: n.If) -> tuple[bool, bool]:
        (then_end, then_break), (else_end, else_break) = self.block(step.then), self.block(step.orelse)
        return then_end or else_end, then_break or else_break

    def visit_repeat(self, step: n.Repeat) -> tuple[bool, bool]:
        body_end, body_break = self.block(step.body)
        return body_end or body_break, False  # a `break` inside leaves the inner loop only


_IDLE_WAYS = _IdleWays()


class FlowChecks(n.StepVisitor[[bool, set[str]], None]):
    """The checks of the steps: one `visit_*` per kind of step, each called with `in_loop` (whether a
    `break` has a loop to leave) and `routed` (the block's routers so far); `run` walks the program."""

    def __init__(self, ctx: CheckContext):
        self.ctx = ctx
        self.acted: set[str] = set()  # agents and environments that may have acted before the step checked
        self.acted_log: list[str] = []  # the order they were added in, to undo a branch
        self.envs = EnvSteps(self)

    def run(self) -> None:
        """Walk the program's steps (E054 if there are none), then check that what is rewarded acts."""
        p = self.ctx.program
        if not p.steps:
            self.ctx.error("E054", "the workflow has no steps", p.name.span, "add e.g. `aggregate answerer`")
        self.check_block(p.steps, False)
        self.check_rewarded_acts()

    def check_rewarded_acts(self) -> None:
        """The rewarded environment steps, or the rewarded agent acts, somewhere in the flow (E071)."""
        p, reward = self.ctx.program, self.ctx.out.reward
        stepped = {s.env.name for s in n.walk_steps(p.steps) if isinstance(s, n.EnvStep)}
        if reward and reward.env is not None and reward.env not in stepped:
            self.ctx.error(
                "E071", f"the rewarded environment `{reward.env}` never steps", p.rewards[0].fn.span
            )
        elif (
            reward
            and reward.agent is not None
            and reward.agent not in {a.name for s in n.walk_events(p.steps) for a in s.agents}
        ):
            agent = p.rewards[0].agent
            assert agent is not None, "`reward.agent` is its name"
            self.ctx.error("E071", f"the rewarded agent `{agent.name}` never acts", agent.span)

    # ---- walking blocks ------------------------------------------------------------------------------
    def mark_acted(self, agent: str) -> None:
        """Record that `agent` may have acted by now (undoable: see `check_branches`)."""
        if agent not in self.acted:
            self.acted.add(agent)
            self.acted_log.append(agent)

    def check_block(self, steps: tuple[n.Step, ...], in_loop: bool, outer: set[str] | None = None) -> None:
        """Check a block; `self.acted` holds the agents that may have acted before each step. `outer`: what
        routed or stepped before the block, in the block around it; its environments still count inside
        (`parallel P by ENV` reads the environment's last step, wherever it was), its routers do not."""
        routed_here = {x for x in outer or () if x in self.ctx.env_names}
        for step in steps:
            self.visit(step, in_loop, routed_here)

    def check_branches(
        self, then: tuple[n.Step, ...], orelse: tuple[n.Step, ...], in_loop: bool, outer: set[str]
    ) -> None:
        """Both branches start from the same `acted`; afterwards it holds what either may have added.

        Undoing the first branch's additions (instead of copying the set) keeps the checker linear.
        """
        mark = len(self.acted_log)
        self.check_block(then, in_loop, outer)
        from_then = self.acted_log[mark:]
        del self.acted_log[mark:]
        self.acted.difference_update(from_then)
        self.check_block(orelse, in_loop, outer)
        for agent in from_then:
            self.mark_acted(agent)

    # ---- control flow ---------------------------------------------------------------------------------
    def visit_repeat(self, s: n.Repeat, in_loop: bool, routed: set[str]) -> None:
        """`repeat at most N { ... } [until C]`: its bound and body, then the body as a loop, then `until`,
        which is tested after a round (so with whatever the body may have done)."""
        self.check_loop_bounds(s)
        if s.bound and s.bound > 1:  # from the second round on, every agent of the body may have acted
            for x in n.walk_events(s.body):
                for agent in x.agents:
                    self.mark_acted(agent.name)
            for e in n.walk_steps(s.body):
                if isinstance(e, n.EnvStep):
                    self.mark_acted(e.env.name)
        self.check_block(s.body, True, routed)
        if s.until:
            self.check_condition(s.until)

    def check_loop_bounds(self, s: n.Repeat) -> None:
        """A loop has a bound of at least 1 (E050, E051) and a body of which every round acts (E052, E055)."""
        if s.bound is None:
            self.ctx.error(
                "E050",
                "loop has no bound: an episode could run forever",
                s.span,
                "write `repeat at most N { ... }`",
            )
        elif s.bound < 1:
            self.ctx.error("E051", "loop bound must be at least 1", s.span)
        if not s.body:
            self.ctx.error("E052", "empty loop", s.span)
        elif _IDLE_WAYS.block(s.body)[0]:
            self.ctx.error(
                "E055",
                "a round of this loop can take no step: it would repeat unchanged",
                s.span,
                "make every round act, or leave the loop with `until` or `break if`",
            )

    def visit_if(self, s: n.If, in_loop: bool, routed: set[str]) -> None:
        """`if C { ... } else { ... }`: the condition, then each branch from the same state."""
        self.check_condition(s.cond)
        self.check_branches(s.then, s.orelse, in_loop, routed)

    def visit_break(self, s: n.Break, in_loop: bool, routed: set[str]) -> None:
        """`break if C`: inside a loop (E053), and its condition."""
        if not in_loop:
            self.ctx.error("E053", "`break` outside a loop", s.span)
        self.check_condition(s.cond)

    def check_condition(self, c: n.Cond) -> None:
        """A condition tests a verdict agent's word, or an acting agent's action, once it may have acted.
        Whether a contract's word can be tested is its `testable` capability, not its name."""
        if c.field is not None:
            self.check_finish(c, c.field)
            return
        if c.agent.name in self.ctx.env_names:
            self.envs.check_condition(c)
            return
        if not self.ctx.require_agent(c.agent):
            return
        contract, words = self.ctx.contract_of(c.agent) or ("", ())
        spec = CONTRACTS.get(contract)  # None: a Python parser
        acts = bool(self.ctx.actions_of(c.agent))
        if not (spec is not None and spec.testable) and not acts:
            self.ctx.error(
                "E060",
                f"conditions test a verdict or an action, but `{c.agent.name}` emits `{contract}`",
                c.agent.span,
                "test an agent that emits `verdict(...)` (after its `verify` step), or let "
                f"`{c.agent.name}` decide: `emits act(ACTION, ..., FINAL)`, "
                f"then `until {c.agent.name} == FINAL`",
            )
        elif c.word.name not in words:
            what = "actions" if acts else "words"
            self.ctx.error(
                "E061",
                f"`{c.agent.name}` never emits `{c.word.name}` (its {what}: {', '.join(words)})",
                c.word.span,
                did_you_mean(c.word.name, words),
            )
        elif c.agent.name not in self.acted:
            self.unreachable(c, acts)

    def unreachable(self, c: n.Cond, acts: bool) -> None:
        """E062: the condition's agent has not acted (given a verdict) on any path before it."""
        self.ctx.error(
            "E062",
            f"unreachable: `{c.agent.name}` has not "
            f"{'acted' if acts else 'given a verdict'} before this condition",
            c.span,
            f"put {'a step of' if acts else '`verify'} {c.agent.name}{'' if acts else '`'} before it",
        )

    def check_finish(self, c: n.Cond, field: n.Ident) -> None:
        """`AGENT.finish == WORD`: how the agent's last turn ended, one of `FINISH_REASONS`, once it acted."""
        if field.name != FINISH:
            self.ctx.error(
                "E096",
                f"`{c.agent.name}.{field.name}`: a condition reads an agent's `{FINISH}`, nothing else",
                field.span,
                f"`{c.agent.name}.{FINISH} == length` holds when its last turn was cut at its token limit",
            )
            return
        if c.agent.name in self.ctx.env_names:
            self.ctx.error(
                "E096",
                f"`{c.agent.name}` is an environment: only an agent's turn has a `{FINISH}`",
                c.agent.span,
            )
            return
        if not self.ctx.require_agent(c.agent):
            return
        if c.word.name not in FINISH_REASONS:
            self.ctx.error(
                "E097",
                f"a turn never finishes with `{c.word.name}` (it ends with {', '.join(FINISH_REASONS)})",
                c.word.span,
                did_you_mean(c.word.name, FINISH_REASONS),
            )
        elif c.agent.name not in self.acted:
            self.unreachable(c, acts=True)

    # ---- steps that act --------------------------------------------------------------------------------

    def visit_call(self, s: n.CallTool, in_loop: bool, routed: set[str]) -> None:
        """`call TOOL on A`: a declared tool, on an agent whose outputs are its queries, after they exist."""
        if s.tool.name not in self.ctx.tool_names:
            self.ctx.error(
                "E013",
                f"undefined tool `{s.tool.name}`",
                s.tool.span,
                did_you_mean(s.tool.name, self.ctx.tool_names),
            )
        self.ctx.used.add(s.tool.name)
        if not self.ctx.require_agent(s.agent):
            return
        contract = self.ctx.contract_of(s.agent)
        actions = self.ctx.actions_of(s.agent)
        if actions and s.tool.name not in actions:
            self.ctx.error(
                "E063",
                f"`{s.agent.name}` never asks for `{s.tool.name}`: a tool serves the members whose action "
                f"is its name, and `{s.agent.name}` acts with {', '.join(actions)}",
                s.tool.span,
                f"name the tool after the action (`tool {actions[0]} = ...`), "
                f"or add `{s.tool.name}` to its actions",
            )
        elif contract and deciding(contract[0]):
            self.ctx.error(
                "E046",
                f"`call` runs a tool on the agent's outputs, but `{s.agent.name}` emits `{contract[0]}` "
                "(a decision, not a query)",
                s.agent.span,
                "call tools on agents that emit `search`, `tag(NAME)`, `answer`, `text` or a Python parser",
            )
        elif s.agent.name not in self.acted:
            self.ctx.error(
                "E062",
                f"unreachable: `{s.agent.name}` has no queries before this call",
                s.span,
                f"put a step of `{s.agent.name}` before it",
            )

    def visit_env(self, s: n.EnvStep, in_loop: bool, routed: set[str]) -> None:
        """`step ENV [on A, ...]`: the environment checks'."""
        self.envs.check_step(s, routed)

    def visit_event(self, s: n.EventStep, in_loop: bool, routed: set[str]) -> None:
        """What every event step is checked for; its kind's entry in the step table says how."""
        known = [self.ctx.require_agent(a) for a in s.agents]  # every unknown one is reported
        if not all(known):
            return
        kind = STEP_KINDS[s.kind]
        for agent in s.agents:
            self.check_event_contract(s, kind, agent)
        self.check_narrowed_actions(s)
        self.check_distinct_agents(s)
        if not takes(s):
            forms = " or ".join(FORMS[f].syntax for f in FORMS if f in kind.cardinality)
            self.ctx.error("E047", f"`{s.kind}` takes {forms.format(kw=s.kind)}", s.span)
        else:
            self.check_replicas(s)
            self.check_router(s, routed)
        if kind.routes:
            routed.add(s.agent.name)
        if s.branch is not None:
            info = check_branch(
                s.branch,
                [a.name for a in s.agents],
                self.ctx.out.diagnostics.append,
                lambda ref: self.ctx.locate_code(ref, "scorer"),
            )
            if info is not None:
                self.ctx.out.branches[s.branch] = info
        for agent in s.agents:
            self.mark_acted(agent.name)

    def check_event_contract(self, s: n.EventStep, kind: StepKind, agent: n.Ident) -> None:
        """A kind may require its agent's contracts (`verify` a verdict); an agent whose contract records a
        decision (a route, a verdict) acts only in the steps that record it."""
        contract, _args = self.ctx.contract_of(agent) or ("", ())
        if kind.contracts is not None and contract not in kind.contracts:
            needs = " or ".join(_contract_form(c) for c in sorted(kind.contracts))
            self.ctx.error(
                "E045",
                f"`{s.kind}` needs an agent that emits {needs}; `{agent.name}` emits `{contract}`",
                agent.span,
            )
        elif kind.contracts is None and deciding(contract):
            steps = " or ".join(f"`{k}`" for k in deciding(contract))
            self.ctx.error(
                "E045",
                f"`{agent.name}` emits `{contract}`: use it in a {steps} step, not `{s.kind}`",
                agent.span,
            )

    def check_narrowed_actions(self, s: n.EventStep) -> None:
        """`KIND A only X, Y`: A acts, and X, Y are distinct actions of its contract (E048)."""
        if not s.only:
            return
        actions = self.ctx.actions_of(s.agent)
        if not actions:
            contract = (self.ctx.contract_of(s.agent) or ("?",))[0]
            self.ctx.error(
                "E048",
                f"`only` narrows an acting agent's actions, but `{s.agent.name}` emits `{contract}`",
                s.only[0].span,
                "declare its actions: `emits act(search, answer)`",
            )
            return
        for i, w in enumerate(s.only):
            if w.name not in actions:
                self.ctx.error(
                    "E048",
                    f"`{s.agent.name}` has no action `{w.name}` (its actions: {', '.join(actions)})",
                    w.span,
                    did_you_mean(w.name, actions),
                )
            elif w.name in [x.name for x in s.only[:i]]:
                self.ctx.error("E048", f"action `{w.name}` is listed twice", w.span)

    def check_distinct_agents(self, s: n.EventStep) -> None:
        """`KIND A, B`: distinct agents, whose members form one active set (E049)."""
        for i, agent in enumerate(s.agents):
            if agent.name in [a.name for a in s.agents[:i]]:
                self.ctx.error(
                    "E049",
                    f"`{agent.name}` is listed twice: a mixed set takes each agent's replicas once",
                    agent.span,
                    f"write `{s.kind} {agent.name}` for all its replicas",
                )

    def check_replicas(self, s: n.EventStep) -> None:
        """Replicas written `[i, j]` exist (E041) and differ (E042)."""
        a = self.ctx.agents.get(s.agent.name)
        size = a.replicas if a else 0
        replicas = s.replicas or ()
        for i, r in enumerate(replicas):
            if not 1 <= r <= size:
                self.ctx.error(
                    "E041",
                    f"replica {r} is out of range: `{s.agent.name}` has {size} replica(s)",
                    s.span,
                    f"replicas are numbered 1..{size}",
                )
            if r in replicas[:i]:
                self.ctx.error("E042", f"replica {r} is selected twice", s.span)

    def check_router(self, s: n.EventStep, routed: set[str]) -> None:
        """`KIND P by R`: R routes over P (E043), and a step recording R's choice comes first in the same
        block (E044); `by ENV` is the environment checks'."""
        if s.by is not None and s.by.name in self.ctx.env_names:
            self.envs.check_router(s, routed)
            return
        if s.by is None or not self.ctx.require_agent(s.by):
            return
        contract = self.ctx.contract_of(s.by)
        choices = [c for k in routers() for c in sorted(k.contracts or ())]  # the contracts that select
        if contract is None or contract[0] not in choices or contract[1] != (s.agent.name,):
            what = (
                f"routes over `{contract[1][0]}`"
                if contract and contract[0] in choices and contract[1]
                else f"emits `{contract[0] if contract else '?'}`"
            )
            self.ctx.error(
                "E043",
                f"`{s.by.name}` does not route over `{s.agent.name}`: it {what}",
                s.by.span,
                f"declare it with `emits {choices[0]}({s.agent.name})`" if choices else None,
            )
        elif s.by.name not in routed:
            steps = " or ".join(f"`{k.keyword} {s.by.name}`" for k in routers())
            self.ctx.error(
                "E044",
                f"`{s.kind} {s.agent.name} by {s.by.name}` needs a {steps} step before it in the same block",
                s.span,
            )
