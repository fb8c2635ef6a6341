"""Assemble a runnable workflow: its graph, task data, one backend per policy, its tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from srpo_dsl.arguments import checked
from srpo_dsl.backends.base import Backend
from srpo_dsl.envs.retrieval import Retriever
from srpo_dsl.lang.analysis import load_graph
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.lang.compile.settings import apply_settings
from srpo_dsl.runtime.hooks import UserTool, load_rows
from srpo_dsl.runtime.prompts import PromptRenderer


@dataclass
class CompiledWorkflow:
    """A compiled workflow file; relative paths in it resolve from its folder. `settings`: the tool options
    set in place of the file's (`tool.NAME.OPTION` -> value, `srpo_dsl.lang.compile.settings`), already in
    `graph`."""

    path: Path
    graph: EventGraph
    settings: Mapping[str, object] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.path.resolve().parent

    @property
    def name(self) -> str:
        return self.graph.name

    @checked
    def resolve(self, relative: str) -> Path:
        p = Path(relative)
        return p if p.is_absolute() else self.folder / p

    @checked
    def renderer(self) -> PromptRenderer:
        return PromptRenderer([self.folder])


def load_workflow(path: Path, settings: Mapping[str, object] | None = None) -> CompiledWorkflow:
    """Compile `path`, with `settings` in place of its tools' options; raises `SrpoError` (diagnostics),
    `FileNotFoundError` or `SettingError`."""
    settings = dict(settings or {})
    return CompiledWorkflow(Path(path), apply_settings(load_graph(path), settings), settings)


def task_data(
    wf: CompiledWorkflow, *, split: str = "train", data: Path | None = None, limit: int | None = None
) -> Sequence[dict[str, object]]:
    """The prompts of the workflow's task: from `data` if given, else from its own binding. A .jsonl
    file's rows are parsed when asked for (`envs.task_table`): a list of them is `list(...)`."""
    from srpo_dsl.envs.data import open_tasks
    from srpo_dsl.lang.checks.schema import TASK_KINDS

    task = wf.graph.task
    if task is None:
        raise ValueError(f"{wf.path}: the workflow declares no task")
    if task.code is not None:
        if data is not None:  # data in place of the loader's rows: read it as a generic task
            return open_tasks(Path(data), kind="dataset", limit=limit)
        rows = load_rows(task.code, split, task.options)
        return rows[:limit] if limit else rows
    kind = TASK_KINDS.lookup(task.kind)
    tasks: Sequence[dict[str, object]] = kind.maker(
        kind.resolved(task.options, wf.resolve), split, data, limit
    )
    return tasks


def build_backends(
    wf: CompiledWorkflow,
    kind: str,
    models: dict[str, str],
    per_policy: Mapping[str, Mapping[str, object]] | None = None,
    **options: object,
) -> dict[str, Backend]:
    """One backend per policy of `models` (policy -> the model it loads, `models.specs.policy_models`;
    non-sharing policies never share weights), with `options` and its own in `per_policy`; an adapter not
    in it (no `--model POLICY=PATH` of its own, e.g. an exported one) generates with its base's backend."""
    from srpo_dsl.backends import make_backend

    policies, own = wf.graph.policies, per_policy or {}
    backends = {n: make_backend(kind, model, **options, **own.get(n, {})) for n, model in models.items()}

    def backend_of(name: str) -> Backend:  # an adapter with no backend of its own: its base's
        base = policies[name].base
        return backends[base] if name not in backends and base is not None else backends[name]

    return {n: backend_of(n) for n in policies}


def build_tools(wf: CompiledWorkflow) -> dict[str, Retriever | UserTool]:
    """Each tool: a retriever of its tool kind (`TOOL_KINDS`: bm25, http) or a Python tool (its module
    imported here); `top_k` is the executor's, per search."""
    from srpo_dsl.envs.retrieval import make_retriever
    from srpo_dsl.lang.checks.schema import TOOL_KINDS

    tools: dict[str, Retriever | UserTool] = {}
    for name, t in wf.graph.tools.items():
        if t.code is not None:
            tools[name] = UserTool(t.code, t.options)
            continue
        opts = TOOL_KINDS.lookup(t.kind).resolved(t.options, wf.resolve)
        opts.pop("top_k", None)
        tools[name] = make_retriever(t.kind, **opts)
    return tools


def probe_tools(wf: CompiledWorkflow) -> None:
    """Ask each tool whose kind has a probe (an HTTP retrieval server: one query, no retry) whether it
    answers, before anything loads; raises the kind's error (`RetrieverError`) naming the tool."""
    from srpo_dsl.envs.retrieval import RetrieverError
    from srpo_dsl.lang.checks.schema import TOOL_KINDS

    for name, t in wf.graph.tools.items():
        kind = TOOL_KINDS.lookup(t.kind) if t.code is None else None
        probe = kind.prober if kind is not None else None
        if kind is None or probe is None:
            continue
        try:
            probe(**kind.resolved(t.options, wf.resolve))
        except RetrieverError as exc:
            elsewhere = f"; another server: --set tool.{name}.url=URL" if "url" in t.options else ""
            raise RetrieverError(f"tool `{name}`: {exc} (checked before anything loads{elsewhere})") from None
