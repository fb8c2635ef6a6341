"""An evaluation as Markdown tables: `srpo-dsl eval`'s output and `Evaluation.table()`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from srpo_dsl.api.rollouts import Evaluation


def metrics_table(ev: Evaluation) -> str:
    """Per dataset Avg@k, Pass@k and costs, then the macro average; with acting roles, a second table:
    each dataset's invalid-output rate per role (`-` for a role without outputs)."""
    k = ev.k
    table = [
        f"| dataset | queries | Avg@{k} | Pass@{k} | tokens / episode | calls / episode "
        "| tool calls / query |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    table += [
        f"| {r.name} | {r.queries} | {100 * r.avg_at_k:.1f} | {100 * r.pass_at_k:.1f} | "
        f"{r.tokens_per_episode:.1f} | {r.calls_per_episode:.2f} | {r.tool_calls_per_query:.2f} |"
        for r in ev.datasets
    ]
    table.append(f"| **macro** | | **{100 * ev.avg_at_k:.1f}** | **{100 * ev.pass_at_k:.1f}** | | | |")
    if ev.roles:
        table += [
            "",
            "| invalid outputs (%) | " + " | ".join(ev.roles) + " |",
            "|---|" + "---:|" * len(ev.roles),
        ]
        table += [
            f"| {r.name} | "
            + " | ".join(f"{100 * r.invalid_rate[x]:.1f}" if x in r.invalid_rate else "-" for x in ev.roles)
            + " |"
            for r in ev.datasets
        ]
    return "\n".join(table)
