"""Static checks of a parsed workflow, and the resolved view the compiler builds on."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from srpo_dsl.lang import nodes as n
from srpo_dsl.lang.branches import check_branch
from srpo_dsl.lang.declarations import AgentInfo, Binding, BranchInfo, PolicyInfo, RewardInfo
from srpo_dsl.lang.env_checks import EnvChecks
from srpo_dsl.lang.messages import Diagnostic, Span, did_you_mean
from srpo_dsl.lang.pycode import (
    ENV_OPTIONS,
    TOOL_OPTIONS,
    CodeRef,
    RefProblem,
    UseName,
    is_reference,
    locate_ref,
)
from srpo_dsl.lang.schema import (
    DEFAULT_MAX_TOKENS,
    POLICY_KINDS,
    TASK_KINDS,
    TOOL_KINDS,
    AgentOptions,
    BindingKind,
    Generation,
    LoraOptions,
    PythonEnv,
    PythonTool,
    TrainOptions,
)
from srpo_dsl.lang.steps import FORMS, STEP_KINDS, StepKind, deciding, routers, takes
from srpo_dsl.lang.templates import check_template
from srpo_dsl.registries import CONTRACTS, REWARDS, ContractSpec, Registry


@dataclass
class Checked:
    """A program with its names resolved and its options validated; `diagnostics` says what failed."""

    program: n.Program
    policies: dict[str, PolicyInfo] = field(default_factory=dict)
    agents: dict[str, AgentInfo] = field(default_factory=dict)
    tools: dict[str, Binding] = field(default_factory=dict)
    envs: dict[str, Binding] = field(default_factory=dict)
    task: Binding | None = None
    reward: RewardInfo | None = None
    train: TrainOptions = field(default_factory=TrainOptions)
    train_code: list[CodeRef] = field(default_factory=list)  # the train block's objective, estimator
    branches: dict[n.Branch, BranchInfo] = field(default_factory=dict)  # each `branch ...` clause resolved
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def code(self) -> tuple[CodeRef, ...]:
        """The user's Python the workflow names: the task, the tools, the environments, the parsers, the
        reward, the branches' scorers, and the train block's objective and advantage estimator."""
        refs = [self.task.code if self.task else None]
        refs += [t.code for t in self.tools.values()]
        refs += [e.code for e in self.envs.values()]
        refs += [a.parser for a in self.agents.values()]
        refs.append(self.reward.code if self.reward else None)
        refs += [b.code for b in self.branches.values()]
        return tuple(r for r in [*refs, *self.train_code] if r is not None)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


def _value(v: n.Value) -> object:
    return v.name if isinstance(v, n.Symbol) else v


def _is_adapter(pol: n.Policy) -> bool:
    return isinstance(pol.source.kind, n.Ident) and pol.source.kind.name == "adapter"


# What srpo-dsl keeps of the options of a Python tool or environment (the rest go to the function).
_KEPT_OPTIONS: dict[str, tuple[type, tuple[str, ...]]] = {
    "tool": (PythonTool, TOOL_OPTIONS),
    "env": (PythonEnv, ENV_OPTIONS),
}
_CODE_USES: dict[str, UseName] = {"task": "loader", "tool": "tool", "env": "env"}

_CONTRACT_ARGS = {"none": "", "pool": "(POOL)", "words": "(...)", "tag": "(NAME)"}


def _contract_form(name: str) -> str:
    """How a contract is written, e.g. `route(POOL)`."""
    spec = CONTRACTS.get(name)
    return f"`{name}{_CONTRACT_ARGS.get(spec.args, '') if spec else ''}`"


def _contract_name(c: n.Contract) -> str:
    """A built-in contract's name, or a Python parser's reference."""
    return c.name.text if isinstance(c.name, n.Ref) else c.name.name


def _actions(c: n.Contract) -> tuple[str, ...]:
    """The actions of an acting contract (`act(search, answer)`, or a Python parser's declared list)."""
    spec = CONTRACTS.get(c.name.name) if isinstance(c.name, n.Ident) else None
    acts = isinstance(c.name, n.Ref) or (spec is not None and spec.acts)
    return tuple(w.name for w in c.args) if acts else ()


_LISTS = {"words": ("word", "(approve, reject)"), "actions": ("action", "(search, answer)")}


class _IdleWays(n.StepVisitor[tuple[bool, bool]]):
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


class _Checker(n.StepVisitor[None]):
    """The checks of declarations, and of steps (one `visit_*` per kind, with `in_loop, routed`)."""

    def __init__(self, program: n.Program, template_dirs: list[Path]):
        self.p = program
        self.base = Path(program.file).parent  # user code paths are relative to the workflow's folder
        self.out = Checked(program)
        self.template_dirs = template_dirs
        self.used: set[str] = set()
        self.by_name = {a.name.name: a for a in program.agents}
        self.tool_names = [t.name.name for t in program.tools]
        self.env_names = [e.name.name for e in program.envs]
        self.acted: set[str] = set()  # agents that may have acted before the step being checked
        self.acted_log: list[str] = []  # the order they were added in, to undo a branch
        self.envs = EnvChecks(self)

    def error(self, code: str, message: str, span: Span, hint: str | None = None) -> None:
        self.out.diagnostics.append(Diagnostic(code, message, span, hint))

    def warn(self, code: str, message: str, span: Span, hint: str | None = None) -> None:
        self.out.diagnostics.append(Diagnostic(code, message, span, hint, "warning"))

    # ---- option blocks -----------------------------------------------------
    def options(
        self,
        model: type,
        opts: tuple[n.Option, ...],
        what: str,
        positional: tuple[str, ...] = (),
        anchor: Span | None = None,
    ) -> dict | None:
        """Validate `opts` against a pydantic model; report at the offending option."""
        data: dict[str, object] = {}
        spans: dict[str, Span] = {}
        ok = True
        for i, opt in enumerate(opts):
            name = opt.name
            if name is None:
                if i >= len(positional):
                    self.error(
                        "E024",
                        f"{what} takes {len(positional)} positional argument(s)",
                        opt.span,
                        f"name it: `key = value` (known: {', '.join(model.model_fields)})",
                    )
                    ok = False
                    continue
                name = positional[i]
            if name in data:
                self.error("E024", f"option `{name}` is given twice", opt.span)
                ok = False
                continue
            if name not in model.model_fields:
                self.error(
                    "E023",
                    f"unknown option `{name}` for {what}",
                    opt.span,
                    did_you_mean(name, model.model_fields)
                    or f"known options: {', '.join(model.model_fields)}",
                )
                ok = False
                continue
            data[name], spans[name] = _value(opt.value), opt.span
        try:
            return model(**data).model_dump() if ok else None
        except ValidationError as exc:
            for err in exc.errors():
                key = str(err["loc"][0]) if err["loc"] else ""
                span = spans.get(key, anchor or (opts[0].span if opts else self.p.name.span))
                msg = (
                    err["msg"].replace("Input should be", "must be").replace("Field required", "is required")
                )
                self.error("E024", f"{what}: `{key}` {msg}", span)
            return None

    # ---- declarations ------------------------------------------------------
    def declarations(self) -> None:
        seen: dict[str, n.Ident] = {}
        names = [x.name for x in self.p.policies] + [x.name for x in self.p.agents]
        names += [x.name for x in self.p.tools] + [x.name for x in self.p.envs]
        for ident in sorted(names, key=lambda i: (i.span.line, i.span.col)):  # the first written is defined
            if ident.name in seen:
                first = seen[ident.name].span
                self.error("E010", f"`{ident.name}` is already defined (line {first.line})", ident.span)
            else:
                seen[ident.name] = ident
        adapters = [p for p in self.p.policies if _is_adapter(p)]
        for pol in [p for p in self.p.policies if not _is_adapter(p)] + adapters:  # bases first
            self.policy(pol)
        self.task()
        for tool in self.p.tools:
            bound = self.binding(tool.source, TOOL_KINDS, "E022", "tool")
            if bound is not None:
                self.out.tools[tool.name.name] = bound
        for env in self.p.envs:
            self.envs.declare(env)
        for agent in self.p.agents:
            self.agent(agent)
        self.reward()
        if len(self.p.trains) > 1:
            self.error("E027", "only one `train` block is allowed", self.p.trains[1].span)
        if self.p.trains:
            opts = self.options(TrainOptions, self.p.trains[0].options, "train", (), self.p.trains[0].span)
            if opts is not None:
                self.out.train = TrainOptions(**opts)
            self.train_code(self.p.trains[0])

    def train_code(self, train: n.Train) -> None:
        """The objective and advantage estimator a train block names as Python code, read with `ast`
        (`train` imports them), each error at its string."""
        for opt in train.options:
            if opt.name in ("objective", "advantage") and is_reference(opt.value):
                use: UseName = "objective" if opt.name == "objective" else "advantage"
                code = self.code_ref(n.Ref(str(opt.value), opt.value_span or opt.span), use)
                if code is not None:
                    self.out.train_code.append(code)

    def binding(self, call: n.Call, kinds: Registry[BindingKind], code: str, what: str) -> Binding | None:
        """The validated `kind(...)`, or None after reporting an unknown kind or bad options."""
        kind = call.kind
        if isinstance(kind, n.Ref):
            return self.code_binding(call, kind, what)
        if kind.name not in kinds:
            self.error(
                code,
                f"unknown {what} kind `{kind.name}`",
                kind.span,
                did_you_mean(kind.name, kinds) or f"known: {', '.join(kinds)}",
            )
            return None
        spec = kinds[kind.name]
        opts = self.options(spec.options, call.args, f"{what} `{kind.name}`", spec.positional, call.span)
        return Binding(kind.name, opts) if opts is not None else None

    def code_binding(self, call: n.Call, ref: n.Ref, what: str) -> Binding | None:
        """A task loader or a tool written in Python: `"file.py:function"(key = value, ...)`."""
        if what == "policy":
            self.error("E095", "a policy is a model, not Python code", ref.span, 'e.g. `hf("Qwen/Qwen3-4B")`')
            return None
        for opt in call.args:
            if opt.name is None:
                self.error("E024", f"the options of Python code are named: `key = value` ({what})", opt.span)
                return None
        data = {o.name: _value(o.value) for o in call.args}
        use = _CODE_USES[what]
        model, kept = _KEPT_OPTIONS.get(use, (None, ()))
        if model is not None:
            ours = tuple(o for o in call.args if o.name in kept)  # the rest go to the function
            opts = self.options(model, ours, f"Python {what}", (), call.span)
            if opts is None:
                return None
            data = {**opts, **data}
        passed = tuple(k for k in data if k not in kept)
        code = self.code_ref(ref, use, passed)
        return Binding("python", data, code) if code is not None else None

    def code_ref(self, ref: n.Ref, use: UseName, options: tuple[str, ...] = ()) -> CodeRef | None:
        """The located function of a reference (read with `ast`, never run); None after reporting why not."""
        try:
            found = locate_ref(ref.text, use, self.base, options)
        except RefProblem as problem:
            self.error(problem.code, str(problem), ref.span, problem.hint)
            return None
        if found.warning:
            self.warn("W003", found.warning, ref.span)
        return found.ref

    def policy(self, pol: n.Policy) -> None:
        kind = pol.source.kind
        bound = self.binding(pol.source, POLICY_KINDS, "E020", "policy")
        src = bound.options if bound is not None else None
        gen = self.options(Generation, pol.options, "policy options", (), pol.span)
        lora = self.options(LoraOptions, pol.lora, "lora", (), pol.span) if pol.lora is not None else None
        if src is None or gen is None or (pol.lora is not None and lora is None):
            return
        if _is_adapter(pol):
            self.adapter(pol, src, gen)
            return
        ref = f"builtin:{src['name']}" if kind.name == "builtin" else src["model"]
        self.out.policies[pol.name.name] = PolicyInfo(
            pol.name.name, kind.name, ref, not pol.frozen, lora, gen
        )

    def adapter(self, pol: n.Policy, src: dict, gen: dict) -> None:
        """`policy NAME = adapter(BASE, r = ..., ...)`: trained on its own over a frozen base."""
        name, base_name = pol.name.name, src.pop("base")
        span = pol.source.args[0].span
        base = self.out.policies.get(base_name)
        self.used.add(base_name)
        if pol.frozen or pol.lora is not None:
            what = "`frozen`" if pol.frozen else "`lora(...)`"
            self.error(
                "E017",
                f"adapter `{name}` cannot be {what}: it is trained",
                pol.span,
                "its LoRA options go inside `adapter(...)`",
            )
        elif base_name not in {p.name.name for p in self.p.policies}:
            names = [p.name.name for p in self.p.policies if p.name.name != name]
            self.error(
                "E015",
                f"adapter `{name}` is on an undefined policy `{base_name}`",
                span,
                did_you_mean(base_name, names),
            )
        elif base is None:
            return  # the base itself has errors, reported there
        elif base.kind == "adapter" or base.trainable or base.lora is not None:
            why = (
                "is an adapter"
                if base.kind == "adapter"
                else "is trainable"
                if base.trainable
                else "has lora"
            )
            self.error(
                "E016",
                f"the base `{base_name}` of adapter `{name}` must be a frozen model without LoRA; it {why}",
                span,
                'adapters share one frozen base: `policy base = hf("MODEL") frozen`',
            )
        else:
            generation = {k: gen[k] if gen[k] is not None else base.generation[k] for k in gen}
            self.out.policies[name] = PolicyInfo(
                name, "adapter", base.model, True, src, generation, base_name
            )

    def task(self) -> None:
        if not self.p.tasks:
            self.error(
                "E025",
                "the workflow declares no `task`",
                self.p.name.span,
                'add e.g. `task math(data = "data/math500.jsonl")`',
            )
            return
        for extra in self.p.tasks[1:]:
            self.error("E025", "only one `task` is allowed", extra.span)
        self.out.task = self.binding(self.p.tasks[0].source, TASK_KINDS, "E021", "task")

    def agent(self, a: n.Agent) -> None:
        if a.replicas < 1:
            self.error("E040", f"pool `{a.name.name}` must have at least 1 replica", a.name.span)
        if a.policy.name not in {p.name.name for p in self.p.policies}:
            self.error(
                "E011",
                f"undefined policy `{a.policy.name}`",
                a.policy.span,
                did_you_mean(a.policy.name, [p.name.name for p in self.p.policies]),
            )
        self.used.add(a.policy.name)
        c = a.contract
        parser = self.code_ref(c.name, "parser") if isinstance(c.name, n.Ref) else None
        if parser is not None:
            self.unique_words(c, "action")
        known = parser is not None if isinstance(c.name, n.Ref) else self.contract(c) is not None
        gen = self.options(AgentOptions, a.options, f"agent `{a.name.name}`", (), a.span)
        pol = self.out.policies.get(a.policy.name)
        if gen is None or pol is None or not known:
            return

        def pick(k, default):
            return (
                gen[k]
                if gen[k] is not None
                else (pol.generation[k] if pol.generation[k] is not None else default)
            )

        info = AgentInfo(
            a.name.name,
            a.replicas,
            a.policy.name,
            a.prompt,
            _contract_name(c),
            tuple(x.name for x in c.args),
            pick("max_tokens", DEFAULT_MAX_TOKENS),
            pick("temperature", 1.0),
            pick("top_p", 1.0),
            parser,
            _actions(c),
            gen["retries"],
            gen["trained"],
            gen["budget"],
            gen["calls"],
            gen["stop"],
        )
        self.out.agents[a.name.name] = info
        self.agent_options(a, info, pol)
        for diag in check_template(a.prompt, a.prompt_span, self.template_dirs):
            self.out.diagnostics.append(diag)

    def trains(self, a: AgentInfo) -> bool:
        """The update trains `a`'s outputs: its policy is trainable and it is not `trained = false`."""
        pol = self.out.policies.get(a.policy)
        return a.trained and pol is not None and pol.trainable

    def agent_options(self, a: n.Agent, info: AgentInfo, pol: PolicyInfo) -> None:
        """The generation and training options of an agent where they cannot apply, each at its option.
        What a contract can do is read from its capabilities (`ContractSpec`), never from its name."""
        at = {o.name: o.span for o in a.options}
        spec = CONTRACTS.get(info.contract) if info.parser is None else None  # None: a Python parser
        several_calls = spec is not None and spec.multi_call and len(info.actions) >= 2  # a tool, a final
        if info.calls > 1 and not several_calls:
            self.error(
                "E074",
                f"`calls = {info.calls}`: `{a.name.name}` emits `{info.contract}`, "
                "not an action that calls a tool",
                at["calls"],
                "several tool calls in one turn need `emits act(TOOL, ..., FINAL)`",
            )
        if info.stop == "replica" and not info.actions:
            self.error(
                "E075",
                f"`stop = replica`: `{a.name.name}` emits `{info.contract}`, "
                "which takes no final action to stop at",
                at["stop"],
                "a replica stops at its own final action: `emits act(ACTION, ..., FINAL)`",
            )
        if not info.trained and not pol.trainable:
            self.warn(
                "W005",
                f"`trained = false` changes nothing: `{a.name.name}` uses the frozen policy `{pol.name}`",
                at["trained"],
                "remove the option (a frozen policy's outputs are never trained)",
            )
        if info.retries and spec is not None and spec.always_valid:  # no output is invalid: none resampled
            self.warn(
                "W006",
                f"`retries = {info.retries}` never resamples: `{a.name.name}` emits `{info.contract}`, "
                "which is always valid",
                at["retries"],
            )

    def contract(self, c: n.Contract) -> ContractSpec | None:
        """The spec of an agent's built-in output contract (None when unknown), its arguments checked."""
        assert isinstance(c.name, n.Ident)
        spec = CONTRACTS.get(c.name.name)
        if spec is None:
            self.error(
                "E030",
                f"unknown output contract `{c.name.name}`",
                c.name.span,
                did_you_mean(c.name.name, CONTRACTS)
                or f'known: {", ".join(CONTRACTS)}, or a Python parser "file.py:function"',
            )
        elif spec.args == "none" and c.args:
            self.error("E031", f"`{c.name.name}` takes no arguments", c.span)
        elif spec.args == "tag" and len(c.args) != 1:
            self.error("E031", f"`{c.name.name}` names exactly one tag: `{c.name.name}(answer)`", c.span)
        elif spec.args == "pool" and len(c.args) != 1:
            self.error("E031", f"`{c.name.name}` names exactly one pool: `{c.name.name}(solver)`", c.span)
        elif spec.args == "pool" and c.args[0].name not in self.by_name:
            self.error(
                "E012",
                f"undefined agent `{c.args[0].name}`",
                c.args[0].span,
                did_you_mean(c.args[0].name, self.by_name),
            )
        elif spec.args in _LISTS and not c.args:
            what, example = _LISTS[spec.args]
            self.error("E031", f"`{c.name.name}` lists its {what}s: `{c.name.name}{example}`", c.span)
        elif spec.args in _LISTS:
            self.unique_words(c, _LISTS[spec.args][0])
        return spec

    def unique_words(self, c: n.Contract, what: str) -> None:
        """A contract's words (a verdict's, or an acting contract's actions) are listed once each."""
        words = [w.name for w in c.args]
        for i, w in enumerate(c.args):
            if w.name in words[:i]:
                self.error("E032", f"`{_contract_name(c)}` {what} `{w.name}` is listed twice", w.span)

    def reward(self) -> None:
        if not self.p.rewards:
            self.error(
                "E026",
                "the workflow declares no `reward`",
                self.p.name.span,
                "add e.g. `reward math_equiv(aggregator, task.answer) invalid -0.1`",
            )
            return
        for extra in self.p.rewards[1:]:
            self.error("E026", "only one `reward` is allowed", extra.span)
        r = self.p.rewards[0]
        if r.agent is None:
            self.env_reward(r)
            return
        agent_ok = self.known_agent(r.agent) and self.rewards_an_answer(r.agent)
        if isinstance(r.fn, n.Ref):
            code = self.python_reward(r)
            if code is not None and agent_ok:
                self.out.reward = RewardInfo(r.fn.text, r.agent.name, None, r.penalty, code)
            return
        ok = agent_ok
        if r.fn.name not in REWARDS:
            self.error(
                "E028",
                f"unknown reward function `{r.fn.name}`",
                r.fn.span,
                did_you_mean(r.fn.name, REWARDS)
                or f'known: {", ".join(REWARDS)}, or a Python function "file.py:function"',
            )
            ok = False
        if r.field is None or len(r.field) != 2 or r.field[0] != "task":
            self.error("E029", "the reference answer is a task field: `task.FIELD`", r.field_span or r.span)
            ok = False
        if ok and r.field is not None:
            self.out.reward = RewardInfo(r.fn.name, r.agent.name, r.field[1], r.penalty)

    def env_reward(self, r: n.Reward) -> None:
        """`reward ENV [invalid P]`: the episode's score is the sum of the rewards ENV returned."""
        assert isinstance(r.fn, n.Ident)
        name = r.fn.name
        self.used.add(name)
        if name in self.env_names:
            if name in self.out.envs:
                self.out.reward = RewardInfo(name, None, None, r.penalty, env=name)
            return
        if name in REWARDS:
            why, hint = (
                "is a reward function: it scores an agent",
                f"write `reward {name}(AGENT, task.FIELD)`",
            )
        elif name in self.by_name:
            why, hint = "is an agent", f"write e.g. `reward exact_match({name}, task.answer)`"
        else:
            why = "is not a declared environment"
            hint = did_you_mean(name, self.env_names) or 'declare it: `env NAME = "file.py:function"(...)`'
        self.error("E028", f"`reward {name}` names an environment, but `{name}` {why}", r.fn.span, hint)

    def python_reward(self, r: n.Reward) -> CodeRef | None:
        """A Python reward gets the whole task row, so it names no field."""
        assert isinstance(r.fn, n.Ref)
        if r.field is not None:
            self.error(
                "E095",
                "a Python reward receives the whole task row: it takes no `task.FIELD`",
                r.field_span or r.span,
                f'write `reward "{r.fn.text}"({r.agent.name})`',
            )
        code = self.code_ref(r.fn, "reward")
        return code if r.field is None else None

    def rewards_an_answer(self, agent: n.Ident) -> bool:
        """The rewarded agent's output is an answer, not a decision (a verdict, a route): E073 otherwise."""
        contract, _args = self.contract_of(agent) or ("", ())
        if deciding(contract):
            self.error(
                "E073",
                f"`{agent.name}` emits `{contract}`, a decision: the reward would score it, not an answer",
                agent.span,
                "reward the agent that answers; to score a decision, give the agent a Python parser contract",
            )
        return not deciding(contract)

    # ---- steps -------------------------------------------------------------
    def known_agent(self, ident: n.Ident) -> bool:
        self.used.add(ident.name)
        if ident.name not in self.by_name:
            self.error(
                "E012", f"undefined agent `{ident.name}`", ident.span, did_you_mean(ident.name, self.by_name)
            )
            return False
        return True

    def contract_of(self, ident: n.Ident) -> tuple[str, tuple[str, ...]] | None:
        a = self.by_name.get(ident.name)
        return (_contract_name(a.contract), tuple(x.name for x in a.contract.args)) if a else None

    def pool_of(self, ident: n.Ident) -> int:
        a = self.by_name.get(ident.name)
        return a.replicas if a else 0

    def act(self, agent: str) -> None:
        """Record that `agent` may have acted by now (undoable: see `branches`)."""
        if agent not in self.acted:
            self.acted.add(agent)
            self.acted_log.append(agent)

    def steps(self, steps: tuple[n.Step, ...], in_loop: bool, outer: set[str] | None = None) -> None:
        """Check a block; `self.acted` holds the agents that may have acted before each step. `outer`: what
        routed or stepped before the block, in the block around it; its environments still count inside
        (`parallel P by ENV` reads the environment's last step, wherever it was), its routers do not."""
        routed_here = {x for x in outer or () if x in self.env_names}
        for step in steps:
            self.visit(step, in_loop, routed_here)

    def branches(
        self, then: tuple[n.Step, ...], orelse: tuple[n.Step, ...], in_loop: bool, outer: set[str]
    ) -> None:
        """Both branches start from the same `acted`; afterwards it holds what either may have added.

        Undoing the first branch's additions (instead of copying the set) keeps the checker linear.
        """
        mark = len(self.acted_log)
        self.steps(then, in_loop, outer)
        from_then = self.acted_log[mark:]
        del self.acted_log[mark:]
        self.acted.difference_update(from_then)
        self.steps(orelse, in_loop, outer)
        for agent in from_then:
            self.act(agent)

    def visit_repeat(self, s: n.Repeat, in_loop: bool, routed: set[str]) -> None:
        if s.bound is None:
            self.error(
                "E050",
                "loop has no bound: an episode could run forever",
                s.span,
                "write `repeat at most N { ... }`",
            )
        elif s.bound < 1:
            self.error("E051", "loop bound must be at least 1", s.span)
        if not s.body:
            self.error("E052", "empty loop", s.span)
        elif _IDLE_WAYS.block(s.body)[0]:
            self.error(
                "E055",
                "a round of this loop can take no step: it would repeat unchanged",
                s.span,
                "make every round act, or leave the loop with `until` or `break if`",
            )
        if s.bound and s.bound > 1:  # from the second round on, every agent of the body may have acted
            for x in n.walk_events(s.body):
                for agent in x.agents:
                    self.act(agent.name)
            for e in n.walk_steps(s.body):
                if isinstance(e, n.EnvStep):
                    self.act(e.env.name)
        self.steps(s.body, True, routed)
        if s.until:
            self.cond(s.until)

    def visit_if(self, s: n.If, in_loop: bool, routed: set[str]) -> None:
        self.cond(s.cond)
        self.branches(s.then, s.orelse, in_loop, routed)

    def visit_break(self, s: n.Break, in_loop: bool, routed: set[str]) -> None:
        if not in_loop:
            self.error("E053", "`break` outside a loop", s.span)
        self.cond(s.cond)

    def visit_call(self, s: n.CallTool, in_loop: bool, routed: set[str]) -> None:
        if s.tool.name not in self.tool_names:
            self.error(
                "E013",
                f"undefined tool `{s.tool.name}`",
                s.tool.span,
                did_you_mean(s.tool.name, self.tool_names),
            )
        self.used.add(s.tool.name)
        if not self.known_agent(s.agent):
            return
        contract = self.contract_of(s.agent)
        actions = self.actions_of(s.agent)
        if actions and s.tool.name not in actions:
            self.error(
                "E063",
                f"`{s.agent.name}` never asks for `{s.tool.name}`: a tool serves the members whose action "
                f"is its name, and `{s.agent.name}` acts with {', '.join(actions)}",
                s.tool.span,
                f"name the tool after the action (`tool {actions[0]} = ...`), "
                f"or add `{s.tool.name}` to its actions",
            )
        elif contract and deciding(contract[0]):
            self.error(
                "E046",
                f"`call` runs a tool on the agent's outputs, but `{s.agent.name}` emits `{contract[0]}` "
                "(a decision, not a query)",
                s.agent.span,
                "call tools on agents that emit `search`, `tag(NAME)`, `answer`, `text` or a Python parser",
            )
        elif s.agent.name not in self.acted:
            self.error(
                "E062",
                f"unreachable: `{s.agent.name}` has no queries before this call",
                s.span,
                f"put a step of `{s.agent.name}` before it",
            )

    def visit_env(self, s: n.EnvStep, in_loop: bool, routed: set[str]) -> None:
        self.envs.step(s, routed)

    def visit_event(self, s: n.EventStep, in_loop: bool, routed: set[str]) -> None:
        """What every event step is checked for; its kind's entry in the step table says how."""
        known = [self.known_agent(a) for a in s.agents]  # every unknown one is reported
        if not all(known):
            return
        kind = STEP_KINDS[s.kind]
        for agent in s.agents:
            self.event_contract(s, kind, agent)
        self.only(s)
        self.mixed(s)
        if not takes(s):
            forms = " or ".join(FORMS[f].syntax for f in FORMS if f in kind.cardinality)
            self.error("E047", f"`{s.kind}` takes {forms.format(kw=s.kind)}", s.span)
        else:
            self.replicas(s)
            self.router(s, routed)
        if kind.routes:
            routed.add(s.agent.name)
        if s.branch is not None:
            info = check_branch(
                s.branch, self.out.diagnostics.append, lambda ref: self.code_ref(ref, "reward")
            )
            if info is not None:
                self.out.branches[s.branch] = info
        for agent in s.agents:
            self.act(agent.name)

    def mixed(self, s: n.EventStep) -> None:
        """`KIND A, B`: distinct agents, whose members form one active set."""
        for i, agent in enumerate(s.agents):
            if agent.name in [a.name for a in s.agents[:i]]:
                self.error(
                    "E049",
                    f"`{agent.name}` is listed twice: a mixed set takes each agent's replicas once",
                    agent.span,
                    f"write `{s.kind} {agent.name}` for all its replicas",
                )

    def event_contract(self, s: n.EventStep, kind: StepKind, agent: n.Ident) -> None:
        """A kind may require its agent's contracts (`verify` a verdict); an agent whose contract records a
        decision (a route, a verdict) acts only in the steps that record it."""
        contract, _args = self.contract_of(agent) or ("", ())
        if kind.contracts is not None and contract not in kind.contracts:
            needs = " or ".join(_contract_form(c) for c in sorted(kind.contracts))
            self.error(
                "E045",
                f"`{s.kind}` needs an agent that emits {needs}; `{agent.name}` emits `{contract}`",
                agent.span,
            )
        elif kind.contracts is None and deciding(contract):
            steps = " or ".join(f"`{k}`" for k in deciding(contract))
            self.error(
                "E045",
                f"`{agent.name}` emits `{contract}`: use it in a {steps} step, not `{s.kind}`",
                agent.span,
            )

    def replicas(self, s: n.EventStep) -> None:
        """Replicas written `[i, j]` exist and differ."""
        size = self.pool_of(s.agent)
        for i, r in enumerate(s.replicas or ()):
            if not 1 <= r <= size:
                self.error(
                    "E041",
                    f"replica {r} is out of range: `{s.agent.name}` has {size} replica(s)",
                    s.span,
                    f"replicas are numbered 1..{size}",
                )
            if r in s.replicas[:i]:  # type: ignore[index]
                self.error("E042", f"replica {r} is selected twice", s.span)

    def router(self, s: n.EventStep, routed: set[str]) -> None:
        """`KIND P by R`: R routes over P, and a step recording R's choice comes first in the same block."""
        if s.by is not None and s.by.name in self.env_names:
            self.envs.router(s, routed)
            return
        if s.by is None or not self.known_agent(s.by):
            return
        contract = self.contract_of(s.by)
        choices = [c for k in routers() for c in sorted(k.contracts or ())]  # the contracts that select
        if contract is None or contract[0] not in choices or contract[1] != (s.agent.name,):
            what = (
                f"routes over `{contract[1][0]}`"
                if contract and contract[0] in choices and contract[1]
                else f"emits `{contract[0] if contract else '?'}`"
            )
            self.error(
                "E043",
                f"`{s.by.name}` does not route over `{s.agent.name}`: it {what}",
                s.by.span,
                f"declare it with `emits {choices[0]}({s.agent.name})`" if choices else None,
            )
        elif s.by.name not in routed:
            steps = " or ".join(f"`{k.keyword} {s.by.name}`" for k in routers())
            self.error(
                "E044",
                f"`{s.kind} {s.agent.name} by {s.by.name}` needs a {steps} step before it in the same block",
                s.span,
            )

    def actions_of(self, ident: n.Ident) -> tuple[str, ...]:
        a = self.by_name.get(ident.name)
        return _actions(a.contract) if a else ()

    def cond(self, c: n.Cond) -> None:
        """A condition tests a verdict agent's word, or an acting agent's action, once it may have acted.
        Whether a contract's word can be tested is its `testable` capability, not its name."""
        if c.agent.name in self.env_names:
            self.envs.cond(c)
            return
        if not self.known_agent(c.agent):
            return
        contract, words = self.contract_of(c.agent) or ("", ())
        spec = CONTRACTS.get(contract)  # None: a Python parser
        acts = bool(self.actions_of(c.agent))
        if not (spec is not None and spec.testable) and not acts:
            self.error(
                "E060",
                f"conditions test a verdict or an action, but `{c.agent.name}` emits `{contract}`",
                c.agent.span,
                "test an agent that emits `verdict(...)` (after its `verify` step), or let "
                f"`{c.agent.name}` decide: `emits act(ACTION, ..., FINAL)`, "
                f"then `until {c.agent.name} == FINAL`",
            )
        elif c.word.name not in words:
            what = "actions" if acts else "words"
            self.error(
                "E061",
                f"`{c.agent.name}` never emits `{c.word.name}` (its {what}: {', '.join(words)})",
                c.word.span,
                did_you_mean(c.word.name, words),
            )
        elif c.agent.name not in self.acted:
            self.error(
                "E062",
                f"unreachable: `{c.agent.name}` has not "
                f"{'acted' if acts else 'given a verdict'} before this condition",
                c.span,
                f"put {'a step of' if acts else '`verify'} {c.agent.name}{'' if acts else '`'} before it",
            )

    def only(self, s: n.EventStep) -> None:
        """`KIND A only X, Y`: A acts, and X, Y are distinct actions of its contract."""
        if not s.only:
            return
        actions = self.actions_of(s.agent)
        if not actions:
            contract = (self.contract_of(s.agent) or ("?",))[0]
            self.error(
                "E048",
                f"`only` narrows an acting agent's actions, but `{s.agent.name}` emits `{contract}`",
                s.only[0].span,
                "declare its actions: `emits act(search, answer)`",
            )
            return
        for i, w in enumerate(s.only):
            if w.name not in actions:
                self.error(
                    "E048",
                    f"`{s.agent.name}` has no action `{w.name}` (its actions: {', '.join(actions)})",
                    w.span,
                    did_you_mean(w.name, actions),
                )
            elif w.name in [x.name for x in s.only[:i]]:
                self.error("E048", f"action `{w.name}` is listed twice", w.span)

    def unused(self) -> None:
        for decl in list(self.p.agents) + list(self.p.policies) + list(self.p.tools) + list(self.p.envs):
            if decl.name.name not in self.used:
                self.warn("W001", f"`{decl.name.name}` is declared but never used", decl.name.span)

    def run(self) -> Checked:
        self.declarations()
        if not self.p.steps:
            self.error("E054", "the workflow has no steps", self.p.name.span, "add e.g. `aggregate answerer`")
        self.steps(self.p.steps, False)
        stepped = {s.env.name for s in n.walk_steps(self.p.steps) if isinstance(s, n.EnvStep)}
        if self.out.reward and self.out.reward.env is not None and self.out.reward.env not in stepped:
            env = self.out.reward.env
            self.error("E071", f"the rewarded environment `{env}` never steps", self.p.rewards[0].fn.span)
        elif (
            self.out.reward
            and self.out.reward.agent is not None
            and self.out.reward.agent not in {a.name for s in n.walk_events(self.p.steps) for a in s.agents}
        ):
            r = self.p.rewards[0]
            self.error("E071", f"the rewarded agent `{r.agent.name}` never acts", r.agent.span)
        self.unused()
        if self.out.policies and not any(p.trainable for p in self.out.policies.values()):
            self.warn("W002", "no policy is trainable: `train` has nothing to update", self.p.name.span)
        elif self.out.agents and not any(self.trains(a) for a in self.out.agents.values()):
            self.warn(
                "W002",
                "no agent's outputs are trained (`trained = false` on every agent of a trainable policy): "
                "`train` has nothing to update",
                self.p.name.span,
            )
        unique = {(d.code, d.span, d.message): d for d in self.out.diagnostics}
        self.out.diagnostics = sorted(unique.values(), key=lambda d: (d.span.line, d.span.col, d.code))
        return self.out


def check(program: n.Program, template_dirs: list[Path] | None = None) -> Checked:
    """Run every static check; template paths resolve against `template_dirs` (default: the file's folder)."""
    dirs = template_dirs if template_dirs is not None else [Path(program.file).resolve().parent]
    return _Checker(program, dirs).run()
