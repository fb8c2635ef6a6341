"""`srpo_dsl.load(path)`: a workflow file, checked and compiled, as a `Workflow` to inspect and to run.

Loading reads the file and the templates and Python files it names, as `validate` does, with `ast`:
nothing of the user's code is imported or run until `run`, `evaluate` or `train` is called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srpo_dsl.api.rollouts import Models
from srpo_dsl.arguments import checked
from srpo_dsl.choices import DecodeMode, Offload
from srpo_dsl.errors import UsageError
from srpo_dsl.io import read_text
from srpo_dsl.lang import analyze
from srpo_dsl.lang.compile.graph import Bounds, EventGraph
from srpo_dsl.lang.compile.settings import SettingError, apply_settings
from srpo_dsl.lang.syntax.messages import Diagnostic, WorkflowError
from srpo_dsl.outputs import check_sources
from srpo_dsl.runtime.setup import CompiledWorkflow

if TYPE_CHECKING:
    import networkx as nx

    from srpo_dsl.api.rollouts import Evaluation, Rollouts
    from srpo_dsl.api.runs import Run
    from srpo_dsl.rl.loop.plan import TrainPlan


@checked
def load(path: str | Path, settings: Mapping[str, Any] | None = None) -> Workflow:  # (checked: any value)
    """The workflow at `path`, checked and compiled. `settings`: tool options in place of the file's,
    `{"tool.NAME.OPTION": value}` (`tool.search.url`: another retrieval server; docs/cli.md), kept by
    `run`, `evaluate` and `train`. Raises `WorkflowError` (its diagnostics) when it has errors,
    `UsageError` when the file cannot be read or a setting names no tool option (or a bad value); never
    imports the workflow's Python."""
    path = Path(path)
    text = read_text(path)
    result = analyze(text, str(path))
    if result.program is None:
        raise WorkflowError(path, result.diagnostics, text)
    settings = dict(settings or {})
    try:
        graph = apply_settings(result.program, settings)
    except SettingError as exc:
        raise UsageError(f"setting {exc}") from None
    return Workflow(path, graph, settings, diagnostics=tuple(result.diagnostics))


@dataclass
class Workflow(CompiledWorkflow):
    """A compiled workflow: its `graph` (`EventGraph`), its `diagnostics` (warnings only: a workflow with
    errors does not load), its cost `bounds`; `run`, `evaluate` and `train` run it."""

    diagnostics: tuple[Diagnostic, ...] = field(default=())

    @property
    def bounds(self) -> Bounds:
        """Static bounds of one episode: events, model calls (sum of K), tool calls, tokens."""
        return self.graph.bounds

    @checked
    def render_prompt(self, role: str, replica: int = 1, data: str | Path | None = None) -> str:
        """`role`'s prompt on the first task (of `data`, or the workflow's own), the team context empty."""
        from srpo_dsl.api.rollouts import tasks_of
        from srpo_dsl.runtime.episode import Episode

        agents = self.graph.agents
        if role not in agents:
            raise UsageError(f"no agent `{role}` (agents: {', '.join(agents)})")
        check_sources([Path(data)] if data is not None else [])
        task = tasks_of(self, Path(data) if data is not None else None, 1, "train")[0]
        ep = Episode("example/0", str(task["id"]), 0, task)
        loop = next(
            (v.where.loop for v in self.graph.event_nodes if role in {a.name for a in v.agents}), None
        )
        turns = self.graph.loops[loop] if loop else 1
        ctx = ep.context(
            role=role,
            replica=replica,
            pool_size=agents[role].replicas,
            turn=1,
            max_turns=turns,
            actions=agents[role].actions,
        )
        return self.renderer().render(agents[role].prompt, ctx)  # a `PromptError` is an `InputError`

    @checked
    def adapter_sizes(self, base: str) -> dict[str, int]:
        """{peft adapter name: trainable parameter count} of `base`'s adapters; empty when its model's config
        is not on this machine."""
        return adapter_sizes(self.graph, base)

    @checked
    def to_networkx(self) -> nx.DiGraph:
        """The event graph as the documented `networkx.DiGraph` (docs/dsl.md, "The compiled event graph")."""
        return self.graph.to_networkx()

    @checked
    def run(
        self,
        *,
        limit: int | None = None,
        samples: int = 1,
        seed: int = 0,
        data: str | Path | None = None,
        backend: str = "hf",
        models: Models = None,
        device: str | None = None,
        decode: DecodeMode = "auto",
        progress: bool = True,
        verbose: bool = False,
    ) -> Rollouts:
        """Roll the workflow out: `samples` episodes for each of the first `limit` tasks (of `data`, or the
        workflow's own task). `models`: a model for every policy, or {policy: model}; for
        `backend="scripted"`, the reply script. Returns the episodes as event traces."""
        from srpo_dsl.api.rollouts import Engines, run_workflow

        engines = Engines(backend, models, device, decode, verbose)
        return run_workflow(self, engines, data, limit, samples, seed, progress)

    @checked
    def evaluate(
        self,
        *,
        k: int = 16,
        data: str | Path | Sequence[str | Path] = (),
        limit: int | None = None,
        seed: int = 0,
        backend: str = "hf",
        models: Models = None,
        device: str | None = None,
        decode: DecodeMode = "auto",
        progress: bool = True,
        verbose: bool = False,
    ) -> Evaluation:
        """Avg@k, Pass@k and costs on each held-out dataset (`data`: files; default the task's eval split)
        and their macro average, with every episode's trace."""
        from srpo_dsl.api.rollouts import Engines, evaluate_workflow

        files = [data] if isinstance(data, (str, Path)) else list(data)
        engines = Engines(backend, models, device, decode, verbose)
        return evaluate_workflow(self, engines, [Path(f) for f in files], limit, k, seed, progress)

    @checked
    def plan(
        self,
        out: str | Path,
        *,
        resume: bool = False,
        models: Models = None,
        eval_data: Sequence[str | Path] = (),
        device: str | None = None,
        backend: str = "hf",
        decode: DecodeMode = "auto",
        ds_config: str | Path | None = None,
        offload: Offload = "none",
        launcher: str | None = None,
        ray_address: str | None = None,
        ray_processes: int | None = None,
        ray_cpus: int = 1,
        verbose: bool = False,
        **options: object,
    ) -> TrainPlan:
        """The plan of a training run into `out` (`train`'s arguments), every input checked and nothing
        loaded: its resolved `opts`, `device`, `processes` (1 + R with R rollout workers), `argv()`.
        `launcher="ray"`: every process a Ray actor on the cluster at `ray_address` (default: RAY_ADDRESS,
        else `auto`), `ray_processes` of them (default 1 + R), `ray_cpus` CPUs each; it joins the cluster."""
        from srpo_dsl.api.rollouts import model_overrides
        from srpo_dsl.api.training import plan_training, ray_setup
        from srpo_dsl.rl.loop.plan import Setup

        models_ = model_overrides(models, list(self.graph.policies))
        files = tuple(Path(p) for p in eval_data)
        config = Path(ds_config) if ds_config else None
        ray = ray_setup(launcher, ray_address, ray_processes, ray_cpus)
        setup = Setup(models_, files, device, backend, decode, config, offload, ray)
        return plan_training(self, Path(out), options, resume, setup, verbose)

    @checked
    def train(
        self,
        out: str | Path,
        *,
        progress: bool = True,
        verbose: bool = False,
        **arguments: Any,
    ) -> Run:
        """Train the workflow's trainable policies into the run folder `out`: `plan`'s arguments (`resume`,
        `models`, `eval_data`, `device`, `backend`, `decode`, `ds_config`, `offload`, `launcher` and the
        `ray_...` settings of `launcher="ray"`), and options that
        override its `train with (...)` block (`steps=20`, `lr=1e-4`, ...). Returns the `Run`."""
        from srpo_dsl.api.training import train_plan

        return train_plan(self.plan(out, verbose=verbose, **arguments), progress, verbose)


def adapter_sizes(graph: EventGraph, base: str) -> dict[str, int]:
    """`Workflow.adapter_sizes` for a compiled graph (`srpo-dsl inspect` reads a graph, not a workflow)."""
    from srpo_dsl.models.specs import resolve_model_spec
    from srpo_dsl.rl.engines.adapters import trainable_parameters

    try:
        return trainable_parameters(resolve_model_spec(graph.policies[base].model), graph.adapters_on(base))
    except (OSError, ValueError):
        return {}
