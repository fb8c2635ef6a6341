"""The allowed values of srpo-dsl's numeric arguments, by argument name, in one place that imports nothing:
the CLI's options take their `min=`/`max=` from here (`Bound.option()`), and the Python API's argument
checks (`srpo_dsl.arguments`) their ranges; an argument of either with one of these names has its bound.

The `train with (...)` options keep theirs in `lang.checks.schema.TrainOptions`, which both also read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    """At least `low`, at most `high` (None: no bound on that side)."""

    low: float | None = None
    high: float | None = None

    def option(self) -> dict[str, float]:
        """The bound as a CLI option's `min=` and `max=`."""
        return {k: v for k, v in (("min", self.low), ("max", self.high)) if v is not None}

    def refusal(self, value: float) -> str | None:
        """Why `value` is out of range (`must be at least 1`), or None when it is in."""
        if self.low is not None and value < self.low:
            return f"must be at least {self.low}" + (
                f" and at most {self.high}" if self.high is not None else ""
            )
        if self.high is not None and value > self.high:
            return f"must be at most {self.high}" + (
                f" and at least {self.low}" if self.low is not None else ""
            )
        return None


BOUNDS: dict[str, Bound] = {
    "limit": Bound(1),  # the first N prompts
    "samples": Bound(1),  # rollouts per prompt
    "k": Bound(1),  # samples per query (Avg@k, Pass@k)
    "replica": Bound(1),  # a replica of an agent's pool, from 1
    "step": Bound(0),  # a checkpoint's step
    "ray_processes": Bound(1),
    "ray_cpus": Bound(1),
    "smoothing": Bound(0.0, 0.999),  # the EMA factor of `plot`'s solid lines
}
