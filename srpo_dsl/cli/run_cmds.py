"""`srpo-dsl run`, `eval`, `audit` and `render`: rollouts of a workflow and what they recorded.

`run` and `eval` check every input (the workflow, its data, the reply script, the output folder,
the device) before anything heavy loads; the libraries' output is hidden unless `--verbose`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from srpo_dsl.cli.common import (
    DECODE,
    EXIT_INPUT,
    VERBOSE,
    CliError,
    Decode,
    Device,
    check_device,
    check_files,
    choices,
    libraries_quiet,
    workflow_failure,
)
from srpo_dsl.cli.outputs import OVERWRITE, check_out, staged_output
from srpo_dsl.io import write_atomic
from srpo_dsl.registries import BACKENDS

if TYPE_CHECKING:
    from srpo_dsl.runtime.episode import Member

BackendKind = choices("BackendKind", BACKENDS)


WORKFLOW = typer.Argument(..., help="A workflow file (*.srpo).", show_default=False)
DATA = typer.Option(None, "--data", help="Task file (JSONL/Parquet); default: the workflow's own binding.")
LIMIT = typer.Option(None, "--limit", min=1, help="Use only the first N prompts.")
SEED = typer.Option(0, "--seed", help="Sampling seed (runs are reproducible).")
BACKEND = typer.Option(BackendKind.hf, "--backend", help="hf | scripted (replies from a JSON file) | vllm.")
MODEL = typer.Option(
    [],
    "--model",
    help="Override a policy's model: PATH (all policies) or POLICY=PATH; "
    "for --backend scripted, the reply script.",
)
DEVICE = typer.Option(None, "--device", help="cpu | cuda (default: cuda when available).")
EVAL_DATA = typer.Option(
    [],
    "--data",
    help="Benchmark file(s); repeat for several (one table row each). Default: the workflow's eval data.",
)


def load_checked(workflow: Path):
    """The compiled workflow; a missing file is one line (exit 2), a broken one its errors (exit 1)."""
    from srpo_dsl.lang.errors import SrpoError
    from srpo_dsl.runtime.setup import load_workflow

    check_files([workflow])
    try:
        return load_workflow(workflow)
    except SrpoError as err:
        raise workflow_failure(err, workflow) from None


def _checked(workflow: Path, data: Sequence[Path], out: Path, overwrite: bool, backend, model, device):
    """Every input of `run`/`eval`, before anything heavy loads: the files, the output folder, the
    device, the workflow (compiled), the model overrides. Returns the workflow and the overrides."""
    from srpo_dsl.runtime.setup import parse_model_overrides

    scripted = backend is BackendKind.scripted
    if scripted and not model:
        raise CliError("--backend scripted needs the reply script: --model replies.json")
    check_files([workflow, *data])
    check_out(out, overwrite, [workflow, *data])
    check_device(device.value if device else None)
    wf = load_checked(workflow)
    try:
        overrides = parse_model_overrides(model, list(wf.graph.policies))
    except ValueError as exc:
        raise CliError(str(exc)) from None
    check_files(Path(p) for p in (overrides.values() if scripted else ()))
    return wf, overrides


def _engines(wf, backend: BackendKind, overrides: dict[str, str], device: Device | None, decode: Decode):
    """The workflow's tools, then its backends (the models load here), with one-line errors."""
    from srpo_dsl.backends.base import BackendError
    from srpo_dsl.envs.retrieval import RetrieverError
    from srpo_dsl.models.specs import policy_models
    from srpo_dsl.runtime.setup import build_backends, build_tools

    options = {"decode": decode.value} | ({"device": device.value} if device else {})
    options = options if backend is BackendKind.hf else {}
    try:
        tools = build_tools(wf)
        models = policy_models(wf.graph, overrides, resolve=backend is not BackendKind.scripted)
        backends = build_backends(wf, backend.value, models, **options)
    except (BackendError, RetrieverError, ValueError, OSError) as exc:
        raise CliError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return backends, tools


def _tasks(wf, data: Path | None, limit: int | None, split: str) -> list[dict]:
    from srpo_dsl.runtime.setup import task_data

    try:
        tasks = task_data(wf, split=split, data=data, limit=limit)
    except FileNotFoundError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    except ValueError as exc:
        raise CliError(str(exc).splitlines()[0], EXIT_INPUT) from None
    if not tasks:
        raise CliError("no tasks to run (empty data file?)", EXIT_INPUT)
    return tasks


def _rollouts(wf, backends, tools, tasks, samples: int, seed: int, desc: str):
    from tqdm import tqdm

    from srpo_dsl.runtime.executor import Executor

    executor = Executor(wf.graph, backends, wf.renderer(), tools)
    with tqdm(total=len(tasks) * samples, desc=desc, unit="episode", leave=False) as bar:
        return executor.run(tasks, samples=samples, seed=seed, on_done=lambda _: bar.update(1))


def run(
    workflow: Path = WORKFLOW,
    data: Path | None = DATA,
    limit: int | None = LIMIT,
    samples: int = typer.Option(1, "--samples", "-G", min=1, help="Rollouts per prompt (the group G)."),
    seed: int = SEED,
    backend: BackendKind = BACKEND,
    model: list[str] = MODEL,
    device: Device | None = DEVICE,
    decode: Decode = DECODE,
    out: Path = typer.Option(
        Path("runs/rollouts"), "--out", help="Output folder (traces.jsonl, summary.json, graph.json)."
    ),
    overwrite: bool = OVERWRITE,
    verbose: bool = VERBOSE,
) -> None:
    """Roll out a workflow and record every event in OUT/traces.jsonl (srpo-trace/2).

    Examples:

      srpo-dsl run workflows/quickstart.srpo --limit 8 --samples 2 --out runs/r1

      srpo-dsl run workflows/math_fixed.srpo --backend scripted --model workflows/math_replies.json --limit 2
    """
    from srpo_dsl.rl.runlog import write_graph
    from srpo_dsl.runtime.traces import to_trace, write_traces

    wf, overrides = _checked(workflow, [data] if data else [], out, overwrite, backend, model, device)
    tasks = _tasks(wf, data, limit, "train")
    with libraries_quiet(not verbose):
        backends, tools = _engines(wf, backend, overrides, device, decode)
        episodes = _rollouts(wf, backends, tools, tasks, samples, seed, "rollouts")
    traces = [to_trace(ep, wf.graph.hash) for ep in episodes]
    with staged_output(out) as stage:
        write_traces(stage / "traces.jsonl", traces)
        write_graph(stage, wf.graph)
        summary = _summary(traces)
        write_atomic(stage / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(
        f"{len(traces)} episodes, {summary['events']} events ({summary['incomplete_events']} incomplete), "
        f"mean reward {summary['mean_reward']:.3f}, invalid actions {summary['invalid_actions']} -> "
        f"{out / 'traces.jsonl'}"
    )


def _summary(traces) -> dict:
    events = [e for t in traces for e in t.events]
    return {
        "episodes": len(traces),
        "events": len(events),
        "incomplete_events": sum(not e.complete for e in events),
        "mean_reward": sum(t.reward for t in traces) / max(len(traces), 1),
        "mean_score": sum(t.score for t in traces) / max(len(traces), 1),
        "invalid_actions": sum(t.invalid_actions for t in traces),
        "mean_set_size": sum(len(e.members) for e in events) / max(len(events), 1),
    }


def metrics_table(
    rows: list, k: int, avg: float, pas: float, roles: Sequence[str] = (), invalid: Sequence[dict] = ()
) -> str:
    """Per dataset Avg@k, Pass@k and costs, then the macro average, as a Markdown table.

    With `roles`, a second table: each dataset's invalid-output rate per role
    (`invalid[i]`: role -> rate of `rows[i]`; `-` for a role without outputs).
    """
    table = [
        f"| dataset | queries | Avg@{k} | Pass@{k} | tokens / episode | calls / episode "
        "| tool calls / query |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    table += [
        f"| {r.name} | {r.queries} | {100 * r.avg_at_k:.1f} | {100 * r.pass_at_k:.1f} | "
        f"{r.tokens_per_episode:.1f} | {r.calls_per_episode:.2f} | {r.tool_calls_per_query:.2f} |"
        for r in rows
    ]
    table.append(f"| **macro** | | **{100 * avg:.1f}** | **{100 * pas:.1f}** | | | |")
    if roles:
        table += ["", "| invalid outputs (%) | " + " | ".join(roles) + " |", "|---|" + "---:|" * len(roles)]
        table += [
            f"| {r.name} | "
            + " | ".join(f"{100 * rates[x]:.1f}" if x in rates else "-" for x in roles)
            + " |"
            for r, rates in zip(rows, invalid)
        ]
    return "\n".join(table)


def eval_cmd(
    workflow: Path = WORKFLOW,
    data: list[Path] = EVAL_DATA,
    k: int = typer.Option(16, "-k", min=1, help="Samples per query (Avg@k, Pass@k)."),
    limit: int | None = LIMIT,
    seed: int = SEED,
    backend: BackendKind = BACKEND,
    model: list[str] = MODEL,
    device: Device | None = DEVICE,
    decode: Decode = DECODE,
    out: Path = typer.Option(
        Path("runs/eval"), "--out", help="Output folder (metrics.json, traces, graph.json)."
    ),
    overwrite: bool = OVERWRITE,
    verbose: bool = VERBOSE,
) -> None:
    """Evaluate a workflow: Avg@k, Pass@k per dataset, their macro average, cost per query.

    A second table gives each dataset's invalid-output rate per role.

    Examples:

      srpo-dsl eval workflows/math_routed.srpo --data data/math500.jsonl -k 16 --out runs/e1

      srpo-dsl eval workflows/quickstart.srpo -k 4 --limit 64
    """
    from srpo_dsl.rl.role_metrics import MetricKeys
    from srpo_dsl.rl.runlog import write_graph
    from srpo_dsl.runtime.metrics import macro_average
    from srpo_dsl.runtime.traces import write_traces

    wf, overrides = _checked(workflow, data, out, overwrite, backend, model, device)
    sets = [(p.stem, _tasks(wf, p, limit, "eval")) for p in data] or [
        (wf.name, _tasks(wf, None, limit, "eval"))
    ]
    keys = MetricKeys.of(wf.graph)
    with libraries_quiet(not verbose):
        backends, tools = _engines(wf, backend, overrides, device, decode)
        rows, invalid, traces = _evaluate(wf, backends, tools, sets, k, seed, keys)
    avg, pas = macro_average(rows)
    with staged_output(out) as stage:
        write_traces(stage / "traces.jsonl", traces)
        write_graph(stage, wf.graph)
        metrics = {
            "k": k,
            "datasets": [{**r.__dict__, "invalid_rate": rates} for r, rates in zip(rows, invalid)],
            "macro": {"avg_at_k": avg, "pass_at_k": pas},
            "workflow": str(workflow),
            "graph_hash": wf.graph.hash,
            "seed": seed,
        }
        write_atomic(stage / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    print(metrics_table(rows, k, avg, pas, keys.roles, invalid))
    print(f"-> {out / 'metrics.json'}")


def _evaluate(wf, backends, tools, sets, k: int, seed: int, keys):
    """Each dataset's row of metrics, its per-role invalid-output rates, and every trace."""
    from srpo_dsl.rl.role_metrics import role_invalid_rates, role_invalid_sums
    from srpo_dsl.runtime.metrics import dataset_metrics
    from srpo_dsl.runtime.traces import to_trace

    rows, invalid, traces = [], [], []
    for name, tasks in sets:
        episodes = _rollouts(wf, backends, tools, tasks, k, seed, f"eval {name}")
        traces += [to_trace(ep, wf.graph.hash) for ep in episodes]
        rows.append(dataset_metrics(name, episodes, k))
        invalid.append(role_invalid_rates(keys, role_invalid_sums(keys, episodes)))
    return rows, invalid, traces


def audit(
    traces: Path = typer.Argument(
        ...,
        help="A run folder (of `run`, `eval` or `train`) or its traces.jsonl.",
        metavar="RUN_OR_TRACES",
        show_default=False,
    ),
    episodes: int = typer.Option(3, "--episodes", "-n", min=1, help="How many episodes to show."),
    width: int = typer.Option(40, "--width", min=8, help="Characters of each output to show."),
) -> None:
    """Print the event audit table: one row per event (pre-action state, outputs, transition, K).

    Incomplete events (a member missing) are flagged; the exit code is 1 if any exists.

    Examples:

      srpo-dsl audit runs/r1 -n 2

      srpo-dsl audit runs/r1/traces.jsonl -n 2
    """
    from srpo_dsl.rl.runlog import TRACES
    from srpo_dsl.runtime.traces import TraceError, read_traces

    if traces.is_dir():
        if not (traces / TRACES).is_file():
            raise CliError(f"{traces}: no {TRACES} in it (is it a run folder?)")
        traces = traces / TRACES
    try:
        eps = read_traces(traces)
    except TraceError as exc:
        raise CliError(str(exc)) from None
    short = lambda s: (s.replace("\n", " ")[: width - 1] + "…") if len(s) > width else s.replace("\n", " ")  # noqa
    for ep in eps[:episodes]:
        print(
            f"episode {ep.episode_id}  reward {ep.reward:+.3f}  answer {ep.answer!r}  "
            f"invalid {ep.invalid_actions}  cost {ep.cost.tokens} tokens / {ep.cost.calls} calls / "
            f"{ep.cost.tool_calls} tool calls"
            + "".join(
                f"  env {k}: {v.steps} steps, done {v.done}, reward {v.reward:+.3f}"
                for k, v in ep.envs.items()
            )
        )
        print("| event | type | state | K | outputs consumed | observations | transition |")
        print("|---|---|---|---:|---|---|---|")
        for i, e in enumerate(ep.events):
            nxt = ep.events[i + 1].event_type if i + 1 < len(ep.events) else "end"
            outs = "; ".join(f"{_who(m, bool(e.actions))}: {short(m.text)}" for m in e.members)
            obs = _observed(e.observations)
            k = f"{len(e.members)}" if e.complete else f"{len(e.members)}/{e.cardinality} INCOMPLETE"
            print(f"| e{i + 1} | {e.event_type} | {e.state_id[:8]} | {k} | {outs} | {obs} | -> {nxt} |")
        print()
    incomplete = sum(len(ep.incomplete_events) for ep in eps)
    events = sum(len(ep.events) for ep in eps)
    print(f"{len(eps)} episodes, {events} events, {incomplete} incomplete")
    if incomplete:
        raise typer.Exit(EXIT_INPUT)


def _who(m: Member, acts: bool) -> str:
    """A member as the audit names it: `role#replica`, its action when the agent acts, or `(invalid)`."""
    if not m.valid:
        return f"{m.role}#{m.replica} (invalid)"
    return f"{m.role}#{m.replica} [{m.parsed['action']}]" if acts else f"{m.role}#{m.replica}"  # type: ignore[index]


def _observed(observations: list[dict]) -> str:
    """An event's observations in a few words: documents retrieved, Python tool results and errors."""
    docs = sum(len(o["documents"]) for o in observations if "documents" in o)
    results = sum("result" in o for o in observations)
    errors = sum("error" in o for o in observations)
    parts = [f"{n} {what}" for n, what in ((docs, "docs"), (results, "results"), (errors, "errors")) if n]
    return ", ".join(parts)


def render(
    workflow: Path = WORKFLOW,
    role: str = typer.Option(..., "--role", "-r", help="The agent whose prompt to show."),
    replica: int = typer.Option(1, "--replica", min=1, help="Replica number in the agent's pool."),
    data: Path | None = DATA,
) -> None:
    """Show a role's prompt on the first task, with an empty team context.

    Example:

      srpo-dsl render workflows/math_routed.srpo --role solver
    """
    from srpo_dsl.runtime.episode import Episode
    from srpo_dsl.runtime.prompts import PromptError

    wf = load_checked(workflow)
    agents = wf.graph.agents
    if role not in agents:
        raise CliError(f"no agent `{role}` in {workflow} (agents: {', '.join(agents)})")
    task = _tasks(wf, data, 1, "train")[0]
    ep = Episode("example/0", str(task["id"]), 0, task)
    loop_of = next((v.where.loop for v in wf.graph.event_nodes if v.agent.name == role), None)
    ctx = ep.context(
        role=role,
        replica=replica,
        pool_size=agents[role].replicas,
        turn=1,
        max_turns=wf.graph.loops[loop_of] if loop_of else 1,
        actions=agents[role].actions,
    )
    try:
        print(wf.renderer().render(agents[role].prompt, ctx))
    except PromptError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
