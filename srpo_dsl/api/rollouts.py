"""`Workflow.run` and `Workflow.evaluate`: rollouts of a workflow, and what they return.

Every input is checked (the data files, the backend, the models, the device) before anything heavy loads;
each failure the user can fix is one `UsageError` or `InputError`, the user's own code a `UserCodeError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from srpo_dsl.api.quiet import libraries_quiet
from srpo_dsl.arguments import checked
from srpo_dsl.devices import check_device
from srpo_dsl.errors import InputError, UsageError
from srpo_dsl.io import write_atomic
from srpo_dsl.outputs import check_files, check_out, check_sources, staged_output
from srpo_dsl.progress import progress
from srpo_dsl.registries import BACKENDS, BackendKind
from srpo_dsl.runfolder import TRACES
from srpo_dsl.runtime.metrics import DatasetMetrics
from srpo_dsl.runtime.traces import TraceEpisode, write_graph, write_traces

if TYPE_CHECKING:
    from srpo_dsl.runtime.episode import Episode
    from srpo_dsl.runtime.setup import CompiledWorkflow

Models = str | Path | Mapping[str, str] | None  # one model for every policy, or policy -> model


@dataclass(frozen=True)
class Engines:
    """How a workflow's policies generate: the backend, the models, the device, the decode loop."""

    backend: str = "hf"
    models: Models = None
    device: str | None = None
    decode: str = "auto"
    verbose: bool = False

    @property
    def kind(self) -> BackendKind:
        """The backend's entry (`BACKENDS`): its factory and what it can do."""
        return BACKENDS[self.backend]

    def check(self, wf: CompiledWorkflow) -> dict[str, str]:
        """The backend and device usable here, the models as {policy: model}; before anything loads."""
        if self.backend not in BACKENDS:
            raise UsageError(f"backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        script = self.kind.replays_script
        if script and not self.models:
            raise UsageError(f"the {self.backend} backend needs its reply script: models='replies.json'")
        check_device(self.device)
        models = model_overrides(self.models, list(wf.graph.policies))
        check_files(Path(p) for p in (models.values() if script else ()))
        check_tools(wf)
        return models

    def build(self, wf: CompiledWorkflow, models: dict[str, str]) -> tuple[dict, dict]:
        """The workflow's backends (the models load here) and its tools, with one-line errors."""
        from srpo_dsl.backends.base import BackendError
        from srpo_dsl.envs.retrieval import RetrieverError
        from srpo_dsl.models.specs import policy_models
        from srpo_dsl.runtime.setup import build_backends, build_tools

        given = {"decode": self.decode} | ({"device": self.device} if self.device else {})
        options = {name: value for name, value in given.items() if name in self.kind.options}
        script = self.kind.replays_script
        try:
            tools = build_tools(wf)
            specs = policy_models(wf.graph, models, resolve=not script)
            own = scripted_tokenizers(wf, specs) if script else {}
            backends = build_backends(wf, self.backend, specs, own, **options)
        except (BackendError, RetrieverError, ValueError, OSError) as exc:
            raise UsageError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        check_scripts(wf, backends)
        return backends, tools


@runtime_checkable
class ReplaysScript(Protocol):
    """A backend that replays a reply script (`backends.scripted`): its roles are checked before the run,
    and the replies it cut at `max_tokens` (`cut`, counted in `unit`) are warned of after."""

    cut: int
    unit: str

    def check_roles(self, roles: Iterable[str]) -> None: ...


def check_scripts(wf: CompiledWorkflow, backends: Mapping[str, object]) -> None:
    """Each reply script (a backend that replays one: `check_roles`) has replies for every agent of its
    policy, before the run starts: else an `InputError` naming the script and the role."""
    from srpo_dsl.backends.base import BackendError

    for policy, backend in backends.items():
        if isinstance(backend, ReplaysScript):
            try:
                backend.check_roles(a.name for a in wf.graph.agents.values() if a.policy == policy)
            except BackendError as exc:
                raise InputError(str(exc)) from None


def scripted_tokenizers(wf: CompiledWorkflow, specs: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Per policy of `specs`, the tokenizer a backend that replays a script (`scripted`) counts its replies
    in: the one of the model the workflow names for it, where it is on this machine (`local_tokenizer`);
    else none (bytes)."""
    from srpo_dsl.models.specs import local_tokenizer

    found = {n: local_tokenizer(wf.graph.policies[n].model) for n in specs}
    return {n: {"tokenizer": path} for n, path in found.items() if path is not None}


def cut_replies(backends: Mapping[str, object]) -> tuple[str, ...]:
    """The warning of a scripted run whose replies were cut at their agent's `max_tokens` (one line, the
    count, the unit they were counted in); () when none was."""
    scripted = {id(b): b for b in backends.values() if isinstance(b, ReplaysScript)}.values()
    cut = sum(b.cut for b in scripted)
    if not cut:
        return ()
    units = " and ".join(sorted({b.unit for b in scripted}))
    return (
        f"the scripted backend cut {cut} repl{'y' if cut == 1 else 'ies'} at their agent's max_tokens "
        f"(counted in {units}): raise max_tokens or shorten the replies",
    )


class ToolServerError(UsageError):
    """A tool's server failed during the rollouts (unreachable, too slow, a bad reply): one line, and the
    `episodes` finished before it (their traces), which `srpo-dsl run` and `eval` write."""

    def __init__(self, message: str, episodes: Sequence[TraceEpisode]):
        super().__init__(message)
        self.episodes = list(episodes)


def check_tools(wf: CompiledWorkflow) -> None:
    """Each tool that can be asked before anything loads answers (a retrieval server): else a usage error."""
    from srpo_dsl.envs.retrieval import RetrieverError
    from srpo_dsl.runtime.setup import probe_tools

    try:
        probe_tools(wf)
    except RetrieverError as exc:
        raise UsageError(str(exc)) from None


def model_overrides(models: Models, policies: list[str]) -> dict[str, str]:
    """{policy: model}: one model (a path or spec) for every policy, or a mapping of declared policies."""
    if models is None:
        return {}
    if isinstance(models, (str, Path)):
        return dict.fromkeys(policies, str(models))
    unknown = [p for p in models if p not in policies]
    if unknown:
        raise UsageError(f"models: no policy `{unknown[0]}` (policies: {', '.join(policies)})")
    return {p: str(m) for p, m in models.items()}


def tasks_of(wf: CompiledWorkflow, data: Path | None, limit: int | None, split: str) -> list[dict]:
    """The prompts to roll out: of `data`, or of the workflow's own task; every one is rolled out, so every
    row is read here (a bad one: its error before anything runs)."""
    from srpo_dsl.runtime.setup import task_data

    try:
        tasks = list(task_data(wf, split=split, data=data, limit=limit))
    except FileNotFoundError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    except ValueError as exc:
        raise InputError(str(exc).splitlines()[0]) from None
    if not tasks:
        raise InputError("no tasks to run (empty data file?)")
    return tasks


def roll_out(
    wf: CompiledWorkflow,
    built: tuple[dict, dict],
    tasks: list[dict],
    samples: int,
    seed: int,
    desc: str | None,
    branching: bool = True,
) -> list[Episode]:
    """`samples` episodes per task; a progress bar on stderr named `desc` (None: none); `branching=False`:
    every `branch` step sampled once (evaluation)."""
    from srpo_dsl.backends.base import BackendError
    from srpo_dsl.envs.retrieval import RetrieverError
    from srpo_dsl.runtime.executor import Executor
    from srpo_dsl.runtime.traces import to_trace

    backends, tools = built
    try:  # a conversation agent's chat template is read here (`runtime.conversations`)
        executor = Executor(wf.graph, backends, wf.renderer(), tools)
    except BackendError as exc:
        raise UsageError(str(exc)) from None
    done: list[Episode] = []
    total = len(tasks) * samples
    with progress(total=total, desc=desc or "", unit="episode", enabled=desc is not None, leave=False) as bar:

        def finished(ep: Episode) -> None:
            done.append(ep)
            bar.update(1)

        try:
            return executor.run(tasks, samples=samples, seed=seed, on_done=finished, branching=branching)
        except RetrieverError as exc:  # mid-run: the episodes finished so far are kept
            message = f"{exc}, after {len(done)} of {total} episodes"
            raise ToolServerError(message, [to_trace(ep, wf.graph.hash) for ep in done]) from None
        except BackendError as exc:  # a backend that cannot answer what the workflow asks of it
            raise InputError(str(exc)) from None


def save_results(
    out: Path,
    overwrite: bool,
    wf: CompiledWorkflow,
    episodes: Sequence[TraceEpisode],
    named: tuple[str, Mapping[str, object]],
) -> Path:
    """A results folder, all or nothing: OUT/traces.jsonl, OUT/graph.json and one JSON file (`named`)."""
    check_out(out, overwrite, [wf.path])
    with staged_output(out) as stage:
        write_traces(stage / TRACES, episodes)
        write_graph(stage, wf.graph)
        write_atomic(stage / named[0], json.dumps(named[1], indent=2) + "\n")
    return out


@dataclass(frozen=True)
class RolloutSummary:
    episodes: int
    events: int
    incomplete_events: int
    mean_reward: float
    mean_score: float
    invalid_actions: int
    mean_set_size: float

    @classmethod
    @checked
    def of(cls, traces: Sequence[TraceEpisode]) -> RolloutSummary:
        events = [e for t in traces for e in t.events]
        n, m = max(len(traces), 1), max(len(events), 1)
        return cls(
            episodes=len(traces),
            events=len(events),
            incomplete_events=sum(not e.complete for e in events),
            mean_reward=sum(t.reward for t in traces) / n,
            mean_score=sum(t.score for t in traces) / n,
            invalid_actions=sum(t.invalid_actions for t in traces),
            mean_set_size=sum(len(e.members) for e in events) / m,
        )


@dataclass(frozen=True)
class Rollouts:
    """What `Workflow.run` returns: every episode as its event trace (srpo-trace/4, docs/traces.md)."""

    workflow: CompiledWorkflow
    episodes: list[TraceEpisode]
    warnings: tuple[str, ...] = ()  # what the run warns of, one line each (`srpo-dsl run` prints them)

    @property
    def summary(self) -> RolloutSummary:
        return RolloutSummary.of(self.episodes)

    @checked
    def save(self, out: str | Path, overwrite: bool = False) -> Path:
        """OUT/traces.jsonl, OUT/summary.json and OUT/graph.json, all or nothing (`srpo-dsl run`'s folder)."""
        return save_results(
            Path(out), overwrite, self.workflow, self.episodes, ("summary.json", asdict(self.summary))
        )


def run_workflow(
    wf: CompiledWorkflow,
    engines: Engines,
    data: str | Path | None,
    limit: int | None,
    samples: int,
    seed: int,
    progress: bool,
) -> Rollouts:
    from srpo_dsl.runtime.traces import to_trace

    if samples < 1 or (limit is not None and limit < 1):
        raise UsageError("samples and limit must be at least 1")
    check_sources([Path(data)] if data is not None else [])
    models = engines.check(wf)
    tasks = tasks_of(wf, Path(data) if data is not None else None, limit, "train")
    with libraries_quiet(not engines.verbose):
        built = engines.build(wf, models)
        episodes = roll_out(wf, built, tasks, samples, seed, "rollouts" if progress else None)
    return Rollouts(wf, [to_trace(ep, wf.graph.hash) for ep in episodes], cut_replies(built[0]))


@dataclass(frozen=True)
class DatasetResult(DatasetMetrics):
    """One held-out dataset's metrics, and each role's invalid-output rate (roles with outputs only)."""

    invalid_rate: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    """What `Workflow.evaluate` returns: per dataset Avg@k, Pass@k and costs, their macro average."""

    workflow: CompiledWorkflow
    k: int
    seed: int
    datasets: list[DatasetResult]
    avg_at_k: float  # the macro average over datasets, in [0, 1]
    pass_at_k: float
    roles: tuple[str, ...]  # the acting roles, in graph order
    episodes: list[TraceEpisode]
    warnings: tuple[str, ...] = ()  # what the run warns of, one line each (`srpo-dsl eval` prints them)

    @checked
    def to_dict(self) -> dict[str, object]:
        """`srpo-dsl eval`'s metrics.json."""
        return {
            "k": self.k,
            "datasets": [asdict(d) for d in self.datasets],
            "macro": {"avg_at_k": self.avg_at_k, "pass_at_k": self.pass_at_k},
            "workflow": str(self.workflow.path),
            "graph_hash": self.workflow.graph.hash,
            "seed": self.seed,
        }

    @checked
    def table(self) -> str:
        """The evaluation as Markdown tables (`srpo-dsl eval`'s output)."""
        return metrics_table(self)

    @checked
    def save(self, out: str | Path, overwrite: bool = False) -> Path:
        """OUT/metrics.json, OUT/traces.jsonl and OUT/graph.json, all or nothing (`srpo-dsl eval`)."""
        return save_results(
            Path(out), overwrite, self.workflow, self.episodes, ("metrics.json", self.to_dict())
        )


def evaluate_workflow(
    wf: CompiledWorkflow,
    engines: Engines,
    data: list[Path],
    limit: int | None,
    k: int,
    seed: int,
    progress: bool,
) -> Evaluation:
    from srpo_dsl.rl.loop.role_metrics import MetricKeys
    from srpo_dsl.runtime.metrics import macro_average

    if k < 1 or (limit is not None and limit < 1):
        raise UsageError("k and limit must be at least 1")
    check_sources(data)
    models = engines.check(wf)
    sets = [(p.stem, tasks_of(wf, p, limit, "eval")) for p in data] or [
        (wf.name, tasks_of(wf, None, limit, "eval"))
    ]
    keys = MetricKeys.of(wf.graph)
    with libraries_quiet(not engines.verbose):
        built = engines.build(wf, models)
        rows, episodes = evaluated_sets(wf, built, sets, k, seed, keys, progress)
    avg, passed = macro_average(rows)
    return Evaluation(wf, k, seed, rows, avg, passed, keys.roles, episodes, cut_replies(built[0]))


def evaluated_sets(wf, built, sets, k: int, seed: int, keys, progress: bool):
    """Each dataset's result (metrics and per-role invalid-output rates), and every episode's trace."""
    from srpo_dsl.rl.loop.role_metrics import role_invalid_rates, role_invalid_sums
    from srpo_dsl.runtime.metrics import dataset_metrics
    from srpo_dsl.runtime.traces import to_trace

    rows: list[DatasetResult] = []
    traces: list[TraceEpisode] = []
    for name, tasks in sets:
        try:
            desc = f"eval {name}" if progress else None
            episodes = roll_out(wf, built, tasks, k, seed, desc, branching=False)
        except ToolServerError as exc:  # the episodes of the datasets before are kept too
            raise ToolServerError(f"{exc} (evaluating {name})", traces + exc.episodes) from None
        traces += [to_trace(ep, wf.graph.hash) for ep in episodes]
        rates = role_invalid_rates(keys, role_invalid_sums(keys, episodes))
        rows.append(DatasetResult(**asdict(dataset_metrics(name, episodes, k)), invalid_rate=rates))
    return rows, traces


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
