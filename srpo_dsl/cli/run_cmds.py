"""`srpo-dsl run`, `eval`, `audit` and `render`: rollouts of a workflow and what they recorded."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import typer

from srpo_dsl.backends import KINDS
from srpo_dsl.cli.common import DECODE, EXIT_INPUT, CliError, Decode, Device, choices
from srpo_dsl.io import write_atomic

BackendKind = choices("BackendKind", KINDS)


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


def _setup(workflow: Path, backend: BackendKind, model: list[str], device: Device | None, decode: Decode):
    """Compile the workflow and build its backends and tools, with one-line errors."""
    from srpo_dsl.backends.base import BackendError
    from srpo_dsl.envs.retrieval import RetrieverError
    from srpo_dsl.lang.errors import SrpoError
    from srpo_dsl.runtime.setup import build_backends, build_tools, load_workflow, parse_model_overrides

    if not workflow.is_file():
        raise CliError(f"cannot read {workflow}: no such file")
    try:
        wf = load_workflow(workflow)
    except SrpoError as err:
        first = err.diagnostics[0]
        raise CliError(
            f"{first.span}: error[{first.code}]: {first.message} "
            f"(run `srpo-dsl validate {workflow}` for all diagnostics)",
            EXIT_INPUT,
        ) from None
    try:
        overrides = parse_model_overrides(model, list(wf.graph.policies))
        if backend is BackendKind.scripted and not overrides:
            raise CliError("--backend scripted needs the reply script: --model replies.json")
        options = {"decode": decode.value} | ({"device": device.value} if device else {})
        options = options if backend is BackendKind.hf else {}
        backends = build_backends(wf, backend.value, overrides, **options)
        tools = build_tools(wf)
    except (BackendError, RetrieverError, ValueError, OSError) as exc:
        raise CliError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return wf, backends, tools


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


@contextmanager
def staged_output(out: Path) -> Iterator[Path]:
    """Write into a temporary sibling folder; it replaces `out` only when everything succeeded."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.partial-"))
    try:
        yield stage
        if out.exists():
            shutil.rmtree(out)
        stage.rename(out)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


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
) -> None:
    """Roll out a workflow and record every event in OUT/traces.jsonl (srpo-trace/1).

    Examples:

      srpo-dsl run workflows/quickstart.srpo --limit 8 --samples 2 --out runs/r1

      srpo-dsl run workflows/math_fixed.srpo --backend scripted --model replies.json --limit 2
    """
    from srpo_dsl.rl.runlog import write_graph
    from srpo_dsl.runtime.traces import to_trace, write_traces

    wf, backends, tools = _setup(workflow, backend, model, device, decode)
    tasks = _tasks(wf, data, limit, "train")
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
) -> None:
    """Evaluate a workflow: Avg@k, Pass@k per dataset, their macro average, cost per query.

    A second table gives each dataset's invalid-output rate per role.

    Examples:

      srpo-dsl eval workflows/math_routed.srpo --data data/math500.jsonl -k 16 --out runs/e1

      srpo-dsl eval workflows/quickstart.srpo -k 4 --limit 64
    """
    from srpo_dsl.rl.role_metrics import MetricKeys, role_invalid_rates, role_invalid_sums
    from srpo_dsl.rl.runlog import write_graph
    from srpo_dsl.runtime.metrics import dataset_metrics, macro_average
    from srpo_dsl.runtime.traces import to_trace, write_traces

    wf, backends, tools = _setup(workflow, backend, model, device, decode)
    sets = [(p.stem, _tasks(wf, p, limit, "eval")) for p in data] or [
        (wf.name, _tasks(wf, None, limit, "eval"))
    ]
    keys = MetricKeys.of(wf.graph)
    rows, invalid, all_traces = [], [], []
    for name, tasks in sets:
        episodes = _rollouts(wf, backends, tools, tasks, k, seed, f"eval {name}")
        all_traces += [to_trace(ep, wf.graph.hash) for ep in episodes]
        rows.append(dataset_metrics(name, episodes, k))
        invalid.append(role_invalid_rates(keys, role_invalid_sums(keys, episodes)))
    avg, pas = macro_average(rows)
    with staged_output(out) as stage:
        write_traces(stage / "traces.jsonl", all_traces)
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


def audit(
    traces: Path = typer.Argument(..., help="A traces.jsonl written by `run`, `eval` or `train`."),
    episodes: int = typer.Option(3, "--episodes", "-n", min=1, help="How many episodes to show."),
    width: int = typer.Option(40, "--width", min=8, help="Characters of each output to show."),
) -> None:
    """Print the event audit table: one row per event (pre-action state, outputs, transition, K).

    Incomplete events (a member missing) are flagged; the exit code is 1 if any exists.

    Example:

      srpo-dsl audit runs/r1/traces.jsonl -n 2
    """
    from srpo_dsl.runtime.traces import TraceError, read_traces

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
        )
        print("| event | type | state | K | outputs consumed | observations | transition |")
        print("|---|---|---|---:|---|---|---|")
        for i, e in enumerate(ep.events):
            nxt = ep.events[i + 1].event_type if i + 1 < len(ep.events) else "end"
            outs = "; ".join(
                f"{m.role}#{m.replica}{'' if m.valid else ' (invalid)'}: {short(m.text)}" for m in e.members
            )
            obs = f"{sum(len(o['documents']) for o in e.observations)} docs" if e.observations else ""
            k = f"{len(e.members)}" if e.complete else f"{len(e.members)}/{e.cardinality} INCOMPLETE"
            print(f"| e{i + 1} | {e.event_type} | {e.state_id[:8]} | {k} | {outs} | {obs} | -> {nxt} |")
        print()
    incomplete = sum(len(ep.incomplete_events) for ep in eps)
    events = sum(len(ep.events) for ep in eps)
    print(f"{len(eps)} episodes, {events} events, {incomplete} incomplete")
    if incomplete:
        raise typer.Exit(EXIT_INPUT)


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
    from srpo_dsl.lang.errors import SrpoError
    from srpo_dsl.runtime.episode import Episode
    from srpo_dsl.runtime.prompts import PromptError
    from srpo_dsl.runtime.setup import load_workflow

    if not workflow.is_file():
        raise CliError(f"cannot read {workflow}: no such file")
    try:
        wf = load_workflow(workflow)
    except SrpoError as err:
        raise CliError(str(err).splitlines()[0], EXIT_INPUT) from None
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
    )
    try:
        print(wf.renderer().render(agents[role].prompt, ctx))
    except PromptError as exc:
        raise CliError(str(exc), EXIT_INPUT) from None
