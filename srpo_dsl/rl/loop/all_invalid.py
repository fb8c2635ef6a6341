"""The warning of a run in which a step's every output is invalid: no agent's parser read any of them.

That is what a model which does not answer the workflow's prompts gives (the embedded `builtin("tiny")`
answers only the quickstart's prompt shapes): a constant return, nothing to learn from, Avg@k at 0. Said
once per run, on stderr, at the first training step or held-out evaluation where it happens."""

from __future__ import annotations

from collections.abc import Mapping

from srpo_dsl.console import quiet
from srpo_dsl.trackers.fanout import warn

RATE = "/invalid_rate"  # metrics.jsonl and eval.jsonl: `role/ROLE/invalid_rate`


def every_output_invalid(row: Mapping[str, object]) -> bool:
    """Whether a step's (or an evaluation's) row says every role's every output was invalid."""
    rates = [value for key, value in row.items() if key.startswith("role/") and key.endswith(RATE)]
    return bool(rates) and all(isinstance(rate, int | float) and rate >= 1.0 for rate in rates)


class AllInvalidWarning:
    """Warns the first time a row of the run has every output invalid; silent after that."""

    def __init__(self) -> None:
        self.said = False

    def check(self, row: Mapping[str, object], what: str) -> None:
        """`what`: the row's kind, as the warning names it (`training rollouts`, `held-out evaluation`)."""
        if self.said or not every_output_invalid(row):
            return
        self.said = True
        if not quiet():
            warn(
                f"step {row['step']}: every output of the {what} was invalid (no parser read any): does the "
                "model answer this workflow's prompts? builtin(\"tiny\") answers only the quickstart's shapes"
            )
