"""Hover on a step: the most it costs, once and per episode (the compiler's static bounds)."""

from __future__ import annotations

from lsprotocol import types as lsp

from srpo_dsl.lang.compile.compiler import BoundCost, step_cost
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lsp.positions import contains
from srpo_dsl.lsp.symbols import step_name
from srpo_dsl.lsp.view import Good


def steps_at(steps: tuple[n.Step, ...], pos: lsp.Position) -> list[n.Step]:
    """The steps whose span holds `pos`, outermost first (a loop, then what in it holds `pos`)."""
    for step in steps:
        if contains(step.span, pos):
            return [step, *steps_at(tuple(x for b in step.blocks for x in b), pos)]
    return []


def cost_text(cost: BoundCost) -> str:
    return (
        f"events {cost.events} · model calls {cost.calls} · tool calls {cost.tool_calls} · "
        f"generated tokens {cost.tokens}"
    )


def step_hover(good: Good, pos: lsp.Position) -> tuple[str, n.Step] | None:
    """Markdown on the innermost step at `pos` (in `good`'s text): its cost once, the most times an
    episode runs it (the bounds of the loops around it) and so its cost per episode, and the
    episode's bounds."""
    chain = steps_at(good.tree.steps, pos)
    program = good.graph
    if not chain or program is None:  # no step here, or the workflow has errors: no bounds to give
        return None
    step, loops = chain[-1], [s.bound or 0 for s in chain[:-1] if isinstance(s, n.Repeat)]
    once = step_cost(step, program.agents)
    times = 1
    for bound in loops:
        times *= bound
    lines = [f"**{step_name(step)}**", f"at most, once: {cost_text(once)}"]
    if times > 1:
        lines.append(
            f"at most {times} times an episode (the bounds of its loops), so at most: "
            + cost_text(once * times)
        )
    b = program.bounds
    paths = f" · {b.paths} paths (tree branches)" if b.paths > 1 else ""
    lines.append(
        "the whole episode, at most: "
        + cost_text(BoundCost(b.events, b.calls, b.tool_calls, b.tokens))
        + paths
    )
    return "\n\n".join(lines), step
