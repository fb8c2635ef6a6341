"""A trained case: `srpo-dsl train` in its own process, its metrics.jsonl followed as it grows, each step
recorded as it ends, the case's figures recorded from the steps it finished (all of them, or those before
it failed or was stopped). Once its last step is in, the run is stopped: its closing evaluation and
checkpoint are not waited for."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpubench.budget import Clock
from gpubench.figures import step_figures
from gpubench.procs import run_child
from gpubench.records import Recorder, case_record
from gpubench.report import row


class Tail:
    """The complete lines appended to a JSON Lines file since the last call, each handed to `on_row`."""

    def __init__(self, path: Path, on_row: Callable[[dict[str, Any]], None]):
        self.path, self.on_row, self.offset = path, on_row, 0

    def __call__(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        for line in complete.decode().splitlines():
            if line.strip():
                self.on_row(json.loads(line))


@dataclass
class TrainCase:
    """One trained case: its part, key and row label, workflow, `--option`s and summary of its steps."""

    part: str
    case: str
    label: str
    workflow: Path
    options: dict[str, Any]
    summary: Callable[[list[dict[str, Any]]], dict[str, Any]]
    base: float | None = None  # the async table's sync steps/s
    steps: list[dict[str, Any]] = field(default_factory=list)


def argv(c: TrainCase, out: Path, device: str, decode: str) -> list[str]:
    cmd = [sys.executable, "-m", "srpo_dsl", "train", str(c.workflow), "--out", str(out), "--device", device]
    cmd += ["--decode", decode]
    for name, value in c.options.items():
        cmd += ["--option", f"{name}={value}"]
    return cmd


def run_train(c: TrainCase, size: str, folder: Path, rec: Recorder, clock: Clock, device: str, decode: str,
              why_not: str | None) -> dict[str, Any]:  # fmt: skip
    """Run (or, with `why_not`, skip) the case; its record, written and its row printed."""
    if why_not is not None:
        record = case_record(c.part, size, c.case, "skipped", note=why_not)
        rec.case(record, row(c.part, c.label, record, base=c.base))
        return record
    planned = int(c.options["steps"])

    def on_row(metrics: dict[str, Any]) -> None:
        c.steps.append(step_figures(metrics))
        rec.step(c.part, size, c.case, c.steps[-1])
        print(f"{size} {c.part} {c.case}: step {len(c.steps)} of {planned} in {c.steps[-1]['step_s']:.2f} s",
              file=sys.stderr, flush=True)  # fmt: skip

    folder.mkdir(parents=True, exist_ok=True)
    tail = Tail(folder / "run" / "metrics.jsonl", on_row)
    outcome = run_child(argv(c, folder / "run", device, decode), folder / "log.txt", clock, tail,
                        finished=lambda: len(c.steps) >= planned, own_stdout=True)  # fmt: skip
    figures = c.summary(c.steps) | {"planned": planned} if c.steps else None
    status, note = outcome.status, outcome.note
    if status == "done" and len(c.steps) < planned:
        status, note = "failed", "it exited before its last step"
    record = case_record(c.part, size, c.case, status, figures, note)
    rec.case(record, row(c.part, c.label, record, base=c.base))
    return record
