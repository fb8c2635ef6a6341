"""Assemble a runnable workflow: its graph, task data, one backend per policy, its tools."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from srpo_dsl.lang import EventGraph, load_graph
from srpo_dsl.runtime.prompts import PromptRenderer


@dataclass
class Workflow:
    """A compiled workflow file; relative paths in it resolve from its folder."""

    path: Path
    graph: EventGraph

    @property
    def folder(self) -> Path:
        return self.path.resolve().parent

    @property
    def name(self) -> str:
        return self.graph.name

    def resolve(self, relative: str) -> Path:
        p = Path(relative)
        return p if p.is_absolute() else self.folder / p

    def renderer(self) -> PromptRenderer:
        return PromptRenderer([self.folder])


def load_workflow(path: Path) -> Workflow:
    """Compile `path`; raises `SrpoError` (diagnostics) or `FileNotFoundError`."""
    return Workflow(Path(path), load_graph(path))


def parse_model_overrides(values: list[str], policies: list[str]) -> dict[str, str]:
    """`--model PATH` (every policy) or `--model POLICY=PATH` (one), repeatable."""
    out: dict[str, str] = {}
    for v in values:
        name, sep, model = v.partition("=")
        if sep and name in policies:
            out[name] = model
        elif sep and not Path(v).exists():
            raise ValueError(f"--model {v}: no policy `{name}` (policies: {', '.join(policies)})")
        else:
            out.update(dict.fromkeys(policies, v))
    return out


def task_data(
    wf: Workflow, *, split: str = "train", data: Path | None = None, limit: int | None = None
) -> list[dict]:
    """The prompts of the workflow's task: from `data` if given, else from its own binding."""
    from srpo_dsl.envs.data import load_tasks
    from srpo_dsl.lang.schema import TASK_KINDS

    task = wf.graph.task
    if task is None:
        raise ValueError(f"{wf.path}: the workflow declares no task")
    if task.code is not None:
        if data is not None:  # a file in place of the loader's rows: read it as a generic task
            return load_tasks(Path(data), kind=Path(data).suffix.lstrip("."), limit=limit)
        from srpo_dsl.runtime.hooks import load_rows

        rows = load_rows(task.code, split, task.options)
        return rows[:limit] if limit else rows
    kind = TASK_KINDS.lookup(task.kind)
    return kind.maker(kind.resolved(task.options, wf.resolve), split, data, limit)


def build_backends(wf: Workflow, kind: str, models: dict[str, str], **options) -> dict:
    """One backend per policy of `models` (policy -> the model it loads, `models.specs.policy_models`;
    non-sharing policies never share weights); an adapter not in it (no `--model POLICY=PATH` of its
    own, e.g. an exported one) generates with its base's backend."""
    from srpo_dsl.backends import make_backend

    policies = wf.graph.policies
    backends = {n: make_backend(kind, model, **options) for n, model in models.items()}
    return {n: backends[n] if n in backends else backends[policies[n].base] for n in policies}  # type: ignore[index]


def build_tools(wf: Workflow) -> dict:
    """Each tool: a retriever of its tool kind (`TOOL_KINDS`: bm25, http) or a Python tool (its module
    imported here); `top_k` is the executor's, per search."""
    from srpo_dsl.envs.retrieval import make_retriever
    from srpo_dsl.lang.schema import TOOL_KINDS
    from srpo_dsl.runtime.hooks import UserTool

    tools: dict = {}
    for name, t in wf.graph.tools.items():
        if t.code is not None:
            tools[name] = UserTool(t.code, t.options)
            continue
        opts = TOOL_KINDS.lookup(t.kind).resolved(t.options, wf.resolve)
        opts.pop("top_k", None)
        tools[name] = make_retriever(t.kind, **opts)
    return tools
