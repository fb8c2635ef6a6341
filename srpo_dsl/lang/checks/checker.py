"""Static checks of a parsed workflow, and the resolved view the compiler builds on (`Checked`).

The checks run as passes over one shared `CheckContext`, in order:
1. the declaration pass (`declaration_checks`): names, policies, task, tools, environments, agents,
   reward and train block, resolved into `Checked`;
2. the flow pass (`flow_checks`): the steps, walked with what the declarations resolved;
3. the use of what is declared, once both passes have seen every use (W001, W002), and whether
   `advantage = state` has an environment that returns a state key (W008, `state_keys`).
The diagnostics are then deduplicated and sorted by position.
"""

from __future__ import annotations

from pathlib import Path

from srpo_dsl.lang.checks.check_context import CheckContext, Checked
from srpo_dsl.lang.checks.declaration_checks import DeclarationChecks
from srpo_dsl.lang.checks.declarations import AgentInfo
from srpo_dsl.lang.checks.flow_checks import FlowChecks
from srpo_dsl.lang.checks.state_keys import warn_no_state_key
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Diagnostic


def check(program: n.Program, template_dirs: list[Path] | None = None) -> Checked:
    """Run every static check; template paths resolve against `template_dirs` (default: the file's folder)."""
    dirs = template_dirs if template_dirs is not None else [Path(program.file).resolve().parent]
    ctx = CheckContext.of(program)
    DeclarationChecks(ctx, dirs).run()
    FlowChecks(ctx).run()
    warn_unused(ctx)
    warn_nothing_trained(ctx)
    warn_no_state_key(ctx)
    ctx.out.diagnostics = _by_position(ctx.out.diagnostics)
    return ctx.out


def warn_unused(ctx: CheckContext) -> None:
    """A declared agent, policy, tool or environment that nothing refers to (W001)."""
    p = ctx.program
    for decl in list(p.agents) + list(p.policies) + list(p.tools) + list(p.envs):
        if decl.name.name not in ctx.used:
            ctx.warn("W001", f"`{decl.name.name}` is declared but never used", decl.name.span)


def warn_nothing_trained(ctx: CheckContext) -> None:
    """A workflow whose update would change nothing: no trainable policy, or no agent of one whose outputs
    are trained (W002)."""
    out = ctx.out

    def trained(a: AgentInfo) -> bool:  # its policy is trainable and it is not `trained = false`
        pol = out.policies.get(a.policy)
        return a.trained and pol is not None and pol.trainable

    if out.policies and not any(p.trainable for p in out.policies.values()):
        ctx.warn("W002", "no policy is trainable: `train` has nothing to update", ctx.program.name.span)
    elif out.agents and not any(trained(a) for a in out.agents.values()):
        ctx.warn(
            "W002",
            "no agent's outputs are trained (`trained = false` on every agent of a trainable policy): "
            "`train` has nothing to update",
            ctx.program.name.span,
        )


def _by_position(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Each diagnostic once (the same code, span and message reported twice is one), by line and column;
    at one position by code, and in the order they were reported."""
    unique = {(d.code, d.span, d.message): d for d in diagnostics}
    return sorted(unique.values(), key=lambda d: (d.span.line, d.span.col, d.code))
