"""The declaration pass: every declaration of a workflow checked and resolved into `Checked` (its
policies, task, tools, environments, agents, reward and train block), before the steps are walked.

Declarations are checked in an order where each reads only what is resolved before it: the policies
(bases before adapters), the task, the tools, the environments, the agents (they read their policy),
the reward (it reads its agent or environment) and the train block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from srpo_dsl.data_sources import data_problem
from srpo_dsl.lang.checks.chattemplate import read_chat_template
from srpo_dsl.lang.checks.check_context import CheckContext, contract_actions, contract_name
from srpo_dsl.lang.checks.declarations import AgentInfo, PolicyInfo, RewardInfo, ToolInfo
from srpo_dsl.lang.checks.env_checks import EnvDeclarations
from srpo_dsl.lang.checks.option_checks import check_binding, check_options
from srpo_dsl.lang.checks.schema import (
    POLICY_KINDS,
    SAMPLING_DEFAULTS,
    TASK_KINDS,
    TOOL_FORMATS,
    TOOL_KINDS,
    AgentOptions,
    DataTask,
    Generation,
    LoraOptions,
    ToolFormat,
    TrainOptions,
)
from srpo_dsl.lang.checks.templates import check_template
from srpo_dsl.lang.checks.toolformat import tool_format_problem
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Span, did_you_mean
from srpo_dsl.lang.syntax.steps import deciding
from srpo_dsl.lang.usercode.pycode import CodeRef, UseName, is_reference
from srpo_dsl.lang.usercode.toolschema import schema_of_tool
from srpo_dsl.registries import CONTRACTS, REWARDS, ContractSpec

# The contract arguments that are lists: (what one item is called, an example list).
_LISTS = {"words": ("word", "(approve, reject)"), "actions": ("action", "(search, answer)")}


def _is_adapter(pol: n.Policy) -> bool:
    return isinstance(pol.source.kind, n.Ident) and pol.source.kind.name == "adapter"


T = TypeVar("T")


def _pick(own: T | None, inherited: T | None, default: T) -> T:
    """A sampling setting: the agent's own, else its policy's, else the default."""
    return own if own is not None else inherited if inherited is not None else default


class DeclarationChecks:
    """The checks of the declarations, filling in `ctx.out` with what resolves; `run` runs them in order."""

    def __init__(self, ctx: CheckContext, template_dirs: list[Path]):
        self.ctx = ctx
        self.template_dirs = template_dirs  # where agents' prompt templates are looked up
        self.envs = EnvDeclarations(self)

    def run(self) -> None:
        """Check every declaration, in the order the module's docstring gives."""
        p = self.ctx.program
        self.check_unique_names()
        bases = [pol for pol in p.policies if not _is_adapter(pol)]
        adapters = [pol for pol in p.policies if _is_adapter(pol)]
        for pol in bases + adapters:  # an adapter reads its base, resolved before it
            self.check_policy(pol)
        self.check_task()
        for tool in p.tools:
            self.check_tool(tool)
        for env in p.envs:
            self.envs.check_env(env)
        for agent in p.agents:
            self.check_agent(agent)
        self.check_reward()
        self.check_train()

    def check_unique_names(self) -> None:
        """Policies, agents, tools and environments share one namespace: a name is declared once (E010)."""
        p = self.ctx.program
        seen: dict[str, n.Ident] = {}
        names = [x.name for x in p.policies] + [x.name for x in p.agents]
        names += [x.name for x in p.tools] + [x.name for x in p.envs]
        for ident in sorted(names, key=lambda i: (i.span.line, i.span.col)):  # the first written is defined
            if ident.name in seen:
                first = seen[ident.name].span
                self.ctx.error("E010", f"`{ident.name}` is already defined (line {first.line})", ident.span)
            else:
                seen[ident.name] = ident

    # ---- policies, task, tools ---------------------------------------------------------------------------
    def check_policy(self, pol: n.Policy) -> None:
        """`policy NAME = kind(...) [options] [lora(...)] [frozen]`, resolved into `out.policies`."""
        kind = pol.source.kind
        bound = check_binding(self.ctx, pol.source, POLICY_KINDS, "E020", "policy")
        src = bound.options if bound is not None else None
        gen = check_options(self.ctx, Generation, pol.options, "policy options", (), pol.span)
        lora = (
            check_options(self.ctx, LoraOptions, pol.lora, "lora", (), pol.span)
            if pol.lora is not None
            else None
        )
        if src is None or gen is None or (pol.lora is not None and lora is None):
            return
        if _is_adapter(pol):
            self.check_adapter(pol, src, gen.model_dump())
            return
        assert isinstance(kind, n.Ident), "a policy in Python is refused (E095): it has no binding"
        ref = f"builtin:{src['name']}" if kind.name == "builtin" else src["model"]
        template = self.check_chat_template(pol, src.get("chat_template"))
        if src.get("tool_format") is not None:
            self.check_tool_format(pol, ref, src["tool_format"], template)
        self.ctx.out.policies[pol.name.name] = PolicyInfo(
            pol.name.name,
            kind.name,
            ref,
            not pol.frozen,
            lora.model_dump() if lora is not None else None,
            gen.model_dump(),
            None,
            src.get("tool_format"),
            template,
        )

    def check_chat_template(self, pol: n.Policy, written: str | None) -> str | None:
        """The text of the policy's `chat_template` file (None without one); E019 where it is missing,
        unreadable or not Jinja."""
        if written is None:
            return None
        text, problem = read_chat_template(written, self.ctx.base)
        if problem is not None:
            self.ctx.error("E019", problem, self._option_at(pol, "chat_template"))
        return text

    def check_tool_format(
        self, pol: n.Policy, model: str, tool_format: ToolFormat, template: str | None
    ) -> None:
        """E018 where the policy's chat template (its own `chat_template`, else a local model's) does not
        write the calls of the policy's format."""
        problem = tool_format_problem(model, self.ctx.base, tool_format, template)
        if problem is not None:
            at = self._option_at(pol, "tool_format")
            others = [f for f in TOOL_FORMATS if f != tool_format]
            self.ctx.error(
                "E018", problem, at, f"its model calls tools otherwise (other formats: {', '.join(others)})"
            )

    @staticmethod
    def _option_at(pol: n.Policy, name: str) -> Span:
        """Where the policy's option `name` is written (its value)."""
        return next(o.value_span or o.span for o in pol.source.args if o.name == name)

    def check_adapter(self, pol: n.Policy, src: Mapping[str, object], gen: dict[str, object]) -> None:
        """`policy NAME = adapter(BASE, r = ..., ...)`: trained on its own over a frozen base."""
        name, base_name = pol.name.name, str(src["base"])
        lora = {k: v for k, v in src.items() if k != "base"}
        span = pol.source.args[0].span
        base = self.ctx.out.policies.get(base_name)
        self.ctx.used.add(base_name)
        if pol.frozen or pol.lora is not None:
            what = "`frozen`" if pol.frozen else "`lora(...)`"
            self.ctx.error(
                "E017",
                f"adapter `{name}` cannot be {what}: it is trained",
                pol.span,
                "its LoRA options go inside `adapter(...)`",
            )
        elif base_name not in {p.name.name for p in self.ctx.program.policies}:
            names = [p.name.name for p in self.ctx.program.policies if p.name.name != name]
            self.ctx.error(
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
            self.ctx.error(
                "E016",
                f"the base `{base_name}` of adapter `{name}` must be a frozen model without LoRA; it {why}",
                span,
                'adapters share one frozen base: `policy base = hf("MODEL") frozen`',
            )
        else:  # what the adapter does not set, it samples as its base does
            generation = {k: gen[k] if gen[k] is not None else base.generation[k] for k in gen}
            self.ctx.out.policies[name] = PolicyInfo(
                name,
                "adapter",
                base.model,
                True,
                lora,
                generation,
                base_name,
                base.tool_format,
                base.chat_template,
            )

    def check_task(self) -> None:
        """Exactly one `task` (E025), resolved into `out.task`."""
        p = self.ctx.program
        if not p.tasks:
            self.ctx.error(
                "E025",
                "the workflow declares no `task`",
                p.name.span,
                'add e.g. `task math(data = "data/math500.jsonl")`',
            )
            return
        for extra in p.tasks[1:]:
            self.ctx.error("E025", "only one `task` is allowed", extra.span)
        self.ctx.out.task = check_binding(self.ctx, p.tasks[0].source, TASK_KINDS, "E021", "task")
        if self.ctx.out.task is not None and self.ctx.out.task.code is None:
            self.check_task_data(p.tasks[0].source, self.ctx.out.task.kind)

    def check_task_data(self, call: n.Call, kind: str) -> None:
        """E107: a task's data that is on disk but that its kind cannot read (a folder that `save_to_disk`
        did not write, a file type it does not read), told from the disk alone; data not there is the
        run's to report (it may be made or mounted later)."""
        spec = TASK_KINDS[kind]
        if spec.options is not DataTask:  # a registered kind reads its paths its own way
            return
        for i, opt in enumerate(call.args):
            name = opt.name or (spec.positional[i] if i < len(spec.positional) else None)
            if name in spec.paths and isinstance(opt.value, str):
                problem = data_problem(self.ctx.base / opt.value, kind)
                if problem is not None:
                    self.ctx.error("E107", problem, opt.value_span or opt.span)

    def check_tool(self, tool: n.Tool) -> None:
        """`tool NAME = kind(...)` or the user's Python, resolved into `out.tools`."""
        bound = check_binding(self.ctx, tool.source, TOOL_KINDS, "E022", "tool")
        if bound is not None:
            schema = schema_of_tool(tool.name.name, bound.code)
            self.ctx.out.tools[tool.name.name] = ToolInfo(bound.kind, bound.options, bound.code, schema)

    # ---- agents and their output contracts ---------------------------------------------------------------
    def check_agent(self, a: n.Agent) -> None:
        """`agent NAME[N] uses POLICY prompt "..." emits CONTRACT [with (...)]`, resolved into `out.agents`
        once its policy, its contract and its options are; then its options and its prompt template."""
        if a.replicas < 1:
            self.ctx.error("E040", f"pool `{a.name.name}` must have at least 1 replica", a.name.span)
        policies = [p.name.name for p in self.ctx.program.policies]
        if a.policy.name not in policies:
            self.ctx.error(
                "E011",
                f"undefined policy `{a.policy.name}`",
                a.policy.span,
                did_you_mean(a.policy.name, policies),
            )
        self.ctx.used.add(a.policy.name)
        known, parser = self.check_agent_contract(a.contract)
        gen = check_options(self.ctx, AgentOptions, a.options, f"agent `{a.name.name}`", (), a.span)
        pol = self.ctx.out.policies.get(a.policy.name)
        if gen is None or pol is None or not known:
            return
        info = self.resolve_agent(a, gen, pol, parser)
        if pol.tool_format is not None:  # its tools go to the model's chat template
            tools = self.ctx.out.tools
            schemas = tuple(tools[x].schema for x in info.actions if x in tools)
            info = replace(info, tools=schemas, tool_format=pol.tool_format)
        self.ctx.out.agents[a.name.name] = info
        self.check_agent_options(a, info, pol)
        for diag in check_template(a.prompt, a.prompt_span, self.template_dirs):
            self.ctx.out.diagnostics.append(diag)
        if info.observe is not None:  # a conversation's later messages: a template, checked alike
            at = next(o.value_span or o.span for o in a.options if o.name == "observe")
            self.ctx.out.diagnostics += check_template(info.observe, at, self.template_dirs)
        if a.system is not None and a.system_span is not None:  # the system message: a template alike
            self.ctx.out.diagnostics += check_template(a.system, a.system_span, self.template_dirs)

    @staticmethod
    def resolve_agent(a: n.Agent, gen: AgentOptions, pol: PolicyInfo, parser: CodeRef | None) -> AgentInfo:
        """An agent's settings: a sampling setting is its own, else its policy's, else the default."""
        inherited = Generation.model_validate(pol.generation)  # the policy's, checked with it
        d, c = SAMPLING_DEFAULTS, a.contract
        return AgentInfo(
            a.name.name,
            a.replicas,
            a.policy.name,
            a.prompt,
            contract_name(c),
            tuple(x.name for x in c.args),
            _pick(gen.max_tokens, inherited.max_tokens, d["max_tokens"]),
            _pick(gen.temperature, inherited.temperature, d["temperature"]),
            _pick(gen.top_p, inherited.top_p, d["top_p"]),
            parser,
            contract_actions(c),
            gen.retries,
            gen.trained,
            gen.budget,
            gen.calls,
            gen.stop,
            gen.observe,
            stop_strings=_pick(gen.stop_strings, inherited.stop_strings, d["stop_strings"]),
            top_k=_pick(gen.top_k, inherited.top_k, d["top_k"]),
            frequency_penalty=_pick(
                gen.frequency_penalty, inherited.frequency_penalty, d["frequency_penalty"]
            ),
            presence_penalty=_pick(gen.presence_penalty, inherited.presence_penalty, d["presence_penalty"]),
            repetition_penalty=_pick(
                gen.repetition_penalty, inherited.repetition_penalty, d["repetition_penalty"]
            ),
            min_tokens=_pick(gen.min_tokens, inherited.min_tokens, d["min_tokens"]),
            system=a.system,
        )

    def check_agent_contract(self, c: n.Contract) -> tuple[bool, CodeRef | None]:
        """Whether an agent's contract resolves, and the function of a Python parser
        (`emits "file.py:function"(ACTION, ...)`, whose optional actions are listed once each)."""
        if isinstance(c.name, n.Ref):
            parser = self.ctx.locate_code(c.name, "parser")
            if parser is not None:
                self.check_unique_words(c, "action")
            return parser is not None, parser
        return self.check_contract(c) is not None, None

    def check_agent_options(self, a: n.Agent, info: AgentInfo, pol: PolicyInfo) -> None:
        """The generation and training options of an agent where they cannot apply, each at its option.
        What a contract can do is read from its capabilities (`ContractSpec`), never from its name."""
        at = {o.name: o.span for o in a.options}
        spec = CONTRACTS.get(info.contract) if info.parser is None else None  # None: a Python parser
        several_calls = spec is not None and spec.multi_call and len(info.actions) >= 2  # a tool, a final
        if info.calls > 1 and not several_calls:
            self.ctx.error(
                "E074",
                f"`calls = {info.calls}`: `{a.name.name}` emits `{info.contract}`, "
                "not an action that calls a tool",
                at["calls"],
                "several tool calls in one turn need `emits act(TOOL, ..., FINAL)`",
            )
        if info.stop == "replica" and not info.actions:
            self.ctx.error(
                "E075",
                f"`stop = replica`: `{a.name.name}` emits `{info.contract}`, "
                "which takes no final action to stop at",
                at["stop"],
                "a replica stops at its own final action: `emits act(ACTION, ..., FINAL)`",
            )
        if not info.trained and not pol.trainable:
            self.ctx.warn(
                "W005",
                f"`trained = false` changes nothing: `{a.name.name}` uses the frozen policy `{pol.name}`",
                at["trained"],
                "remove the option (a frozen policy's outputs are never trained)",
            )
        if info.retries and spec is not None and spec.always_valid:  # no output is invalid: none resampled
            self.ctx.warn(
                "W006",
                f"`retries = {info.retries}` never resamples: `{a.name.name}` emits `{info.contract}`, "
                "which is always valid",
                at["retries"],
            )

    def check_contract(self, c: n.Contract) -> ContractSpec | None:
        """The spec of a built-in output contract (None when unknown), its arguments checked."""
        assert isinstance(c.name, n.Ident)
        spec = CONTRACTS.get(c.name.name)
        if spec is None:
            self.ctx.error(
                "E030",
                f"unknown output contract `{c.name.name}`",
                c.name.span,
                did_you_mean(c.name.name, CONTRACTS)
                or f'known: {", ".join(CONTRACTS)}, or a Python parser "file.py:function"',
            )
        elif spec.args == "none" and c.args:
            self.ctx.error("E031", f"`{c.name.name}` takes no arguments", c.span)
        elif spec.args == "tag" and len(c.args) != 1:
            self.ctx.error("E031", f"`{c.name.name}` names exactly one tag: `{c.name.name}(answer)`", c.span)
        elif spec.args == "pool" and len(c.args) != 1:
            self.ctx.error("E031", f"`{c.name.name}` names exactly one pool: `{c.name.name}(solver)`", c.span)
        elif spec.args == "pool" and c.args[0].name not in self.ctx.agents:
            self.ctx.error(
                "E012",
                f"undefined agent `{c.args[0].name}`",
                c.args[0].span,
                did_you_mean(c.args[0].name, self.ctx.agents),
            )
        elif spec.args in _LISTS and not c.args:
            what, example = _LISTS[spec.args]
            self.ctx.error("E031", f"`{c.name.name}` lists its {what}s: `{c.name.name}{example}`", c.span)
        elif spec.args in _LISTS:
            self.check_unique_words(c, _LISTS[spec.args][0])
        return spec

    def check_unique_words(self, c: n.Contract, what: str) -> None:
        """A contract's words (a verdict's, or an acting contract's actions) are listed once each (E032)."""
        words = [w.name for w in c.args]
        for i, w in enumerate(c.args):
            if w.name in words[:i]:
                self.ctx.error("E032", f"`{contract_name(c)}` {what} `{w.name}` is listed twice", w.span)

    # ---- the reward ----------------------------------------------------------------------------------------
    def check_reward(self) -> None:
        """Exactly one `reward` (E026): of an agent's answer (a registered function or the user's Python),
        or of an environment (`reward ENV`); resolved into `out.reward`."""
        p = self.ctx.program
        if not p.rewards:
            self.ctx.error(
                "E026",
                "the workflow declares no `reward`",
                p.name.span,
                "add e.g. `reward math_equiv(aggregator, task.answer) invalid -0.1`",
            )
            return
        for extra in p.rewards[1:]:
            self.ctx.error("E026", "only one `reward` is allowed", extra.span)
        r = p.rewards[0]
        if r.agent is None:
            self.check_env_reward(r)
            return
        agent_ok = self.ctx.require_agent(r.agent) and self.check_rewarded_output(r.agent)
        if isinstance(r.fn, n.Ref):
            code = self.check_python_reward(r)
            if code is not None and agent_ok:
                self.ctx.out.reward = RewardInfo(r.fn.text, r.agent.name, None, r.penalty, code)
            return
        self.check_registered_reward(r, agent_ok)

    def check_registered_reward(self, r: n.Reward, agent_ok: bool) -> None:
        """`reward FUNCTION(AGENT, task.FIELD)`: a registered function, and the field it compares with."""
        assert isinstance(r.fn, n.Ident) and r.agent is not None
        ok = agent_ok
        if r.fn.name not in REWARDS:
            self.ctx.error(
                "E028",
                f"unknown reward function `{r.fn.name}`",
                r.fn.span,
                did_you_mean(r.fn.name, REWARDS)
                or f'known: {", ".join(REWARDS)}, or a Python function "file.py:function"',
            )
            ok = False
        if r.field is None or len(r.field) != 2 or r.field[0] != "task":
            self.ctx.error(
                "E029", "the reference answer is a task field: `task.FIELD`", r.field_span or r.span
            )
            ok = False
        if ok and r.field is not None:
            self.ctx.out.reward = RewardInfo(r.fn.name, r.agent.name, r.field[1], r.penalty)

    def check_env_reward(self, r: n.Reward) -> None:
        """`reward ENV [invalid P]`: the episode's score is the sum of the rewards ENV returned."""
        assert isinstance(r.fn, n.Ident)
        name = r.fn.name
        self.ctx.used.add(name)
        if name in self.ctx.env_names:
            if name in self.ctx.out.envs:  # else its declaration has errors, reported there
                self.ctx.out.reward = RewardInfo(name, None, None, r.penalty, env=name)
            return
        if name in REWARDS:
            why, hint = (
                "is a reward function: it scores an agent",
                f"write `reward {name}(AGENT, task.FIELD)`",
            )
        elif name in self.ctx.agents:
            why, hint = "is an agent", f"write e.g. `reward exact_match({name}, task.answer)`"
        else:
            why = "is not a declared environment"
            hint = (
                did_you_mean(name, self.ctx.env_names) or 'declare it: `env NAME = "file.py:function"(...)`'
            )
        self.ctx.error("E028", f"`reward {name}` names an environment, but `{name}` {why}", r.fn.span, hint)

    def check_python_reward(self, r: n.Reward) -> CodeRef | None:
        """A Python reward gets the whole task row, so it names no field (E095)."""
        assert isinstance(r.fn, n.Ref) and r.agent is not None
        if r.field is not None:
            self.ctx.error(
                "E095",
                "a Python reward receives the whole task row: it takes no `task.FIELD`",
                r.field_span or r.span,
                f'write `reward "{r.fn.text}"({r.agent.name})`',
            )
        code = self.ctx.locate_code(r.fn, "reward")
        return code if r.field is None else None

    def check_rewarded_output(self, agent: n.Ident) -> bool:
        """The rewarded agent's output is an answer, not a decision (a verdict, a route): E073 otherwise."""
        contract, _args = self.ctx.contract_of(agent) or ("", ())
        if deciding(contract):
            self.ctx.error(
                "E073",
                f"`{agent.name}` emits `{contract}`, a decision: the reward would score it, not an answer",
                agent.span,
                "reward the agent that answers; to score a decision, give the agent a Python parser contract",
            )
        return not deciding(contract)

    # ---- the train block -----------------------------------------------------------------------------------
    def check_train(self) -> None:
        """At most one `train with (...)` (E027), its options resolved into `out.train`."""
        trains = self.ctx.program.trains
        if len(trains) > 1:
            self.ctx.error("E027", "only one `train` block is allowed", trains[1].span)
        if trains:
            opts = check_options(self.ctx, TrainOptions, trains[0].options, "train", (), trains[0].span)
            if opts is not None:
                self.ctx.out.train = opts
            self.locate_train_code(trains[0])

    def locate_train_code(self, train: n.Train) -> None:
        """The objective and advantage estimator a train block names as Python code, read with `ast`
        (`train` imports them), each error at its string."""
        for opt in train.options:
            if opt.name in ("objective", "advantage") and is_reference(opt.value):
                use: UseName = "objective" if opt.name == "objective" else "advantage"
                code = self.ctx.locate_code(n.Ref(str(opt.value), opt.value_span or opt.span), use)
                if code is not None:
                    self.ctx.out.train_code.append(code)
