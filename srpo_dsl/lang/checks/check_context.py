"""What the checker's passes share: the result they fill in (`Checked`) and the context they report
through (`CheckContext`).

The declaration pass (`declaration_checks`) resolves the declarations into `Checked`; the flow pass
(`flow_checks`) reads them while it walks the steps; both add to the same diagnostics and to the same
set of names seen used, which the driver (`checker`) reads last (W001).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from srpo_dsl.lang.checks.declarations import (
    AgentInfo,
    Binding,
    BranchInfo,
    EnvInfo,
    PolicyInfo,
    RewardInfo,
    ToolInfo,
)
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Diagnostic, Span, did_you_mean
from srpo_dsl.lang.usercode.pycode import CodeRef, UseName, locate_ref
from srpo_dsl.lang.usercode.pysource import RefProblem
from srpo_dsl.registries import CONTRACTS


@dataclass
class Checked:
    """A program with its names resolved and its options validated; `diagnostics` says what failed."""

    program: n.Program
    policies: dict[str, PolicyInfo] = field(default_factory=dict)
    agents: dict[str, AgentInfo] = field(default_factory=dict)
    tools: dict[str, ToolInfo] = field(default_factory=dict)
    envs: dict[str, EnvInfo] = field(default_factory=dict)
    task: Binding | None = None
    reward: RewardInfo | None = None
    train: TrainOptions = field(default_factory=lambda: TrainOptions())
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


def contract_name(c: n.Contract) -> str:
    """A built-in contract's name, or a Python parser's reference."""
    return c.name.text if isinstance(c.name, n.Ref) else c.name.name


def contract_actions(c: n.Contract) -> tuple[str, ...]:
    """The actions of an acting contract (`act(search, answer)`, or a Python parser's declared list)."""
    spec = CONTRACTS.get(c.name.name) if isinstance(c.name, n.Ident) else None
    acts = isinstance(c.name, n.Ref) or (spec is not None and spec.acts)
    return tuple(w.name for w in c.args) if acts else ()


@dataclass
class CheckContext:
    """The program under check and what every pass reads and adds to: the result, the names seen used."""

    program: n.Program
    out: Checked
    base: Path  # user code paths are relative to the workflow's folder
    agents: dict[str, n.Agent]  # the declared agents by name (of a name declared twice, the last)
    tool_names: list[str]
    env_names: list[str]
    used: set[str] = field(default_factory=set)  # declared names something refers to (else W001)

    @classmethod
    def of(cls, program: n.Program) -> CheckContext:
        return cls(
            program,
            Checked(program),
            Path(program.file).parent,
            {a.name.name: a for a in program.agents},
            [t.name.name for t in program.tools],
            [e.name.name for e in program.envs],
        )

    def error(self, code: str, message: str, span: Span, hint: str | None = None) -> None:
        self.out.diagnostics.append(Diagnostic(code, message, span, hint))

    def warn(self, code: str, message: str, span: Span, hint: str | None = None) -> None:
        self.out.diagnostics.append(Diagnostic(code, message, span, hint, "warning"))

    def require_agent(self, ident: n.Ident) -> bool:
        """Whether `ident` names a declared agent (E012 if not); either way the name counts as used."""
        self.used.add(ident.name)
        if ident.name not in self.agents:
            self.error(
                "E012", f"undefined agent `{ident.name}`", ident.span, did_you_mean(ident.name, self.agents)
            )
            return False
        return True

    def contract_of(self, ident: n.Ident) -> tuple[str, tuple[str, ...]] | None:
        """An agent's contract as written: its name (or Python reference) and its arguments."""
        a = self.agents.get(ident.name)
        return (contract_name(a.contract), tuple(x.name for x in a.contract.args)) if a else None

    def actions_of(self, ident: n.Ident) -> tuple[str, ...]:
        a = self.agents.get(ident.name)
        return contract_actions(a.contract) if a else ()

    def locate_code(self, ref: n.Ref, use: UseName, options: tuple[str, ...] = ()) -> CodeRef | None:
        """The located function of a reference (read with `ast`, never run); None after reporting why not."""
        try:
            found = locate_ref(ref.text, use, self.base, options)
        except RefProblem as problem:
            self.error(problem.code, str(problem), ref.span, problem.hint)
            return None
        if found.warning:
            self.warn("W003", found.warning, ref.span)
        return found.ref
