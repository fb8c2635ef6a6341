"""The trackers of one run, started and fed together. A tracker that cannot start (not installed, its
server down, a wrong URI) or fails later is one warning line on stderr, and the run goes on without it:
its local files (metrics.jsonl, eval.jsonl, ...) are complete either way. Each tracker's run id is kept
in OUT/trackers.json, so a resumed run continues the same tracker run."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from srpo_dsl.io import write_json
from srpo_dsl.registries import TRACKERS
from srpo_dsl.trackers.base import TrackedRun, Tracker

IDS = "trackers.json"  # OUT/trackers.json: tracker name -> its run id


def warn(line: str) -> None:
    """`warning: LINE` on stderr, above the progress bar."""
    from tqdm import tqdm  # not tqdm.auto: in a notebook that warns (TqdmExperimentalWarning) on import

    tqdm.write(f"warning: {line}", file=sys.stderr)


def dropped(name: str, problem: str) -> None:
    warn(f"report_to {name}: {problem}; the run goes on without it")


def problem_of(exc: BaseException) -> str:
    """An exception as one short line."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 240 else text[:237] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def start_tracker(name: str, run: TrackedRun) -> Tracker | None:
    """The tracker `name` started for `run`, or None after one warning."""
    kind = TRACKERS.lookup(name)
    if kind.needs_package is not None and importlib.util.find_spec(kind.needs_package) is None:
        dropped(
            name, f"{kind.needs_package} is not installed" + (f" ({kind.install})" if kind.install else "")
        )
        return None
    try:
        return kind.make(run)
    except Exception as exc:  # a tracker never stops the run
        dropped(name, f"cannot start ({problem_of(exc)})")
        return None


class Trackers:
    """The run's trackers that started; one that fails is dropped after its warning."""

    def __init__(self, names: Sequence[str], run: TrackedRun):
        """Start each of `names` for `run` (a resumed run: each with its id from OUT/trackers.json)."""
        ids = read_ids(run.out) if run.start else {}
        self.active: dict[str, Tracker] = {}
        for name in names:
            if (started := start_tracker(name, replace(run, resume_id=ids.get(name)))) is not None:
                self.active[name] = started
        kept = {n: t.run_id for n, t in self.active.items() if t.run_id is not None}
        if kept:
            write_json(run.out / IDS, kept)

    @property
    def keep_files(self) -> bool:
        """Whether a tracker takes files (the graph, the plots)."""
        return any(t.keeps_files for t in self.active.values())

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._each("log", metrics, step)

    def log_files(self, files: Sequence[Path], base: Path) -> None:
        self._each("log_files", files, base)

    def finish(self, failed: bool = False) -> None:
        self._each("finish", failed)
        self.active.clear()

    def _each(self, method: str, *args: object) -> None:
        for name, tracker in list(self.active.items()):
            try:
                getattr(tracker, method)(*args)
            except Exception as exc:  # a tracker never stops the run
                del self.active[name]
                dropped(name, f"failed ({problem_of(exc)})")


def read_ids(out: Path) -> dict[str, str]:
    """OUT/trackers.json ({} when absent or unreadable: the trackers then start new runs)."""
    try:
        ids = json.loads((out / IDS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in ids.items() if isinstance(v, str)} if isinstance(ids, dict) else {}
