"""`srpo-dsl run`, `eval`, `audit` and `render`: rollouts of a workflow and what they recorded.

`run` and `eval` are `Workflow.run` and `Workflow.evaluate` (`srpo_dsl.api`), which check every input
(the data, the reply script, the device) before anything heavy loads; here the output folder is checked
first, and the results saved with `save`. The libraries' output is hidden unless `--verbose`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import typer

from srpo_dsl.argranges import BOUNDS
from srpo_dsl.choices import DecodeMode
from srpo_dsl.cli.common import (
    DECODE,
    EXIT_INPUT,
    OVERWRITE,
    SET,
    SOURCES,
    CliError,
    Decode,
    Device,
    choices,
    parse_settings,
)
from srpo_dsl.console import note
from srpo_dsl.outputs import check_files, check_out, check_sources
from srpo_dsl.registries import BACKENDS

if TYPE_CHECKING:
    from srpo_dsl.api import Workflow
    from srpo_dsl.api.runs import BranchMark, Member, TraceEpisode, TraceEvent

BackendName = choices("BackendName", BACKENDS)


WORKFLOW = typer.Argument(..., help="A workflow file (*.srpo).", show_default=False)
DATA = typer.Option(
    None,
    "--data",
    help=f"Task data in place of the workflow's own: {SOURCES}. Paths are from the working directory.",
)
LIMIT = typer.Option(None, "--limit", **BOUNDS["limit"].option(), help="Use only the first N prompts.")
SEED = typer.Option(0, "--seed", help="Sampling seed (runs are reproducible).")
BACKEND = typer.Option(BackendName.hf, "--backend", help="hf | scripted (replies from a JSON file) | vllm.")
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
    help=f"Benchmark data, repeat for several (one table row each): {SOURCES}. "
    "Default: the workflow's eval data.",
)


def load_checked(workflow: Path, settings: list[str] | None = None) -> Workflow:
    """The compiled workflow, with `--set` tool options; a missing file or a bad setting is one line
    (exit 2), a broken workflow its errors (exit 1)."""
    from srpo_dsl.api import load

    check_files([workflow])
    return load(workflow, parse_settings(settings or []))


def models_of(model: list[str], wf: Workflow) -> dict[str, str]:
    """`--model PATH` (every policy) or `--model POLICY=PATH` (one), repeatable, as {policy: model}."""
    try:
        return parse_model_overrides(model, list(wf.graph.policies))
    except ValueError as exc:
        raise CliError(str(exc)) from None


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


class EngineFlags(TypedDict):
    """The rollout settings of `Workflow.run` and `Workflow.evaluate`."""

    backend: str
    models: dict[str, str]
    device: str | None
    decode: DecodeMode
    verbose: bool


def engines_of(
    backend: BackendName, model: list[str], wf: Workflow, device: Device | None, decode: Decode, verbose: bool
) -> EngineFlags:
    """The API's rollout settings from the command line's flags."""
    if BACKENDS[backend.value].replays_script and not model:
        raise CliError(f"--backend {backend.value} needs the reply script: --model replies.json")
    return {
        "backend": backend.value,
        "models": models_of(model, wf),
        "device": device.value if device else None,
        "decode": decode.value,
        "verbose": verbose,
    }


@contextmanager
def kept_on_failure(wf: Workflow, out: Path, overwrite: bool) -> Iterator[None]:
    """A tool's server that fails mid-run: the episodes finished before it are written to `out` (traces,
    summary, graph), and the error says so; still one line, exit 2."""
    from srpo_dsl.api import Rollouts
    from srpo_dsl.api.rollouts import ToolServerError

    try:
        yield
    except ToolServerError as exc:
        if not exc.episodes:
            raise
        Rollouts(wf, exc.episodes).save(out, overwrite)
        raise CliError(f"{exc}; the {len(exc.episodes)} finished are in {out / 'traces.jsonl'}") from None


def run(
    workflow: Path = WORKFLOW,
    data: Path | None = DATA,
    limit: int | None = LIMIT,
    samples: int = typer.Option(
        1, "--samples", "-G", **BOUNDS["samples"].option(), help="Rollouts per prompt (the group G)."
    ),
    seed: int = SEED,
    backend: BackendName = BACKEND,
    model: list[str] = MODEL,
    device: Device | None = DEVICE,
    decode: Decode = DECODE,
    out: Path = typer.Option(
        Path("runs/rollouts"), "--out", help="Output folder (traces.jsonl, summary.json, graph.json)."
    ),
    overwrite: bool = OVERWRITE,
    setting: list[str] = SET,
    verbose: bool = False,
) -> None:
    """Roll out a workflow and record every event in OUT/traces.jsonl (srpo-trace/4).

    Examples:

      srpo-dsl run workflows/quickstart.srpo --limit 8 --samples 2 --out runs/r1

      srpo-dsl run workflows/math_fixed.srpo --backend scripted --model workflows/math_replies.json --limit 2

      srpo-dsl run workflows/search_r1.srpo --set tool.search.url=http://10.0.0.5:8000/retrieve
    """
    check_files([workflow])
    check_sources([data])
    check_out(out, overwrite, [workflow, data])
    wf = load_checked(workflow, setting)
    engines = engines_of(backend, model, wf, device, decode, verbose)
    with kept_on_failure(wf, out, overwrite):
        rollouts = wf.run(limit=limit, samples=samples, seed=seed, data=data, **engines)
    rollouts.save(out, overwrite)
    for line in rollouts.warnings:
        note(f"warning: {line}")
    s = rollouts.summary
    print(
        f"{s.episodes} episodes, {s.events} events ({s.incomplete_events} incomplete), "
        f"mean reward {s.mean_reward:.3f}, invalid actions {s.invalid_actions} -> {out / 'traces.jsonl'}"
    )


def eval_cmd(
    workflow: Path = WORKFLOW,
    data: list[Path] = EVAL_DATA,
    k: int = typer.Option(16, "-k", **BOUNDS["k"].option(), help="Samples per query (Avg@k, Pass@k)."),
    limit: int | None = LIMIT,
    seed: int = SEED,
    backend: BackendName = BACKEND,
    model: list[str] = MODEL,
    device: Device | None = DEVICE,
    decode: Decode = DECODE,
    out: Path = typer.Option(
        Path("runs/eval"), "--out", help="Output folder (metrics.json, traces, graph.json)."
    ),
    overwrite: bool = OVERWRITE,
    setting: list[str] = SET,
    verbose: bool = False,
) -> None:
    """Evaluate a workflow: Avg@k, Pass@k per dataset, their macro average, cost per query.

    A second table gives each dataset's invalid-output rate per role.

    Examples:

      srpo-dsl eval workflows/math_routed.srpo --data data/math_sample.jsonl -k 16 --out runs/e1

      srpo-dsl eval workflows/quickstart.srpo -k 4 --limit 64
    """
    check_files([workflow])
    check_sources(data)
    check_out(out, overwrite, [workflow, *data])
    wf = load_checked(workflow, setting)
    engines = engines_of(backend, model, wf, device, decode, verbose)
    with kept_on_failure(wf, out, overwrite):
        evaluation = wf.evaluate(k=k, data=data, limit=limit, seed=seed, **engines)
    evaluation.save(out, overwrite)
    for line in evaluation.warnings:
        note(f"warning: {line}")
    print(evaluation.table())
    print(f"-> {out / 'metrics.json'}")


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
    from srpo_dsl.api.runs import load_traces

    eps = load_traces(traces)
    short = lambda s: (s.replace("\n", " ")[: width - 1] + "…") if len(s) > width else s.replace("\n", " ")  # noqa
    for ep in eps[:episodes]:
        print(
            f"episode {ep.episode_id}  reward {ep.reward:+.3f}  answer {ep.answer!r}  "
            f"invalid {ep.invalid_actions}  cost {ep.cost.tokens} tokens / {ep.cost.calls} calls / "
            f"{ep.cost.tool_calls} tool calls"
            + "".join(
                f"  env {k}: {v.steps} steps, done {v.done}, reward {v.reward:+.3f}"
                + (f", words {' '.join(v.words)}" if v.words else "")
                for k, v in ep.envs.items()
            )
        )
        _audit_table(ep, short)
        print()
    incomplete = sum(len(ep.incomplete_events) for ep in eps)
    events = sum(len(ep.events) for ep in eps)
    print(f"{len(eps)} episodes, {events} events, {incomplete} incomplete")
    if incomplete:
        raise typer.Exit(EXIT_INPUT)


def _audit_table(ep: TraceEpisode, short: Callable[[str], str]) -> None:
    """One row per event. A branching episode's rows name each event by its id within the episode, the
    event it follows on its path, its alternative (kept or pruned, its score) and its backed-up return."""
    tree = any(e.branch is not None for e in ep.events)
    extra = " after | alternative | return |" if tree else ""
    print(f"| event | type | state | K | outputs consumed | observations | transition |{extra}")
    print("|---|---|---|---:|---|---|---|" + ("---|---|---:|" if tree else ""))
    local = lambda event_id: event_id.removeprefix(ep.episode_id)  # noqa: E731
    for i, e in enumerate(ep.events):
        outs = "; ".join(f"{_who(m, bool(e.actions))}: {short(m.text)}" for m in e.members)
        outs += f" (after {len(e.tries)} invalid tries, resampled)" if e.tries else ""
        k = f"{len(e.members)}" if e.complete else f"{len(e.members)}/{e.cardinality} INCOMPLETE"
        name = local(e.event_id) if tree else f"e{i + 1}"
        row = f"| {name} | {e.event_type} | {e.state_id[:8]} | {k} | {outs} | {_observed(e.observations)} |"
        row += f" -> {_following(ep.events, i)} |"
        if tree:
            ret = "" if e.tree_return is None else f"{e.tree_return:+.3f}"
            row += f" {local(e.parent) if e.parent else 'start'} | {_alternative(e.branch)} | {ret} |"
        print(row)
    for leaf in ep.leaves:
        print(f"path {leaf.path}: reward {leaf.reward:+.3f}, score {leaf.score:.3f}, answer {leaf.answer!r}")


def _following(events: list[TraceEvent], i: int) -> str:
    """The step(s) after event i: the events that follow it on their paths (several after a tree branch;
    an alternative that was pruned: none), else, in a trace without parents, the next event."""
    e = events[i]
    if e.branch is not None and not e.branch.kept:
        return "pruned"
    if any(x.parent is not None for x in events):
        after = dict.fromkeys(x.event_type for x in events if x.parent == e.event_id)
        return ", ".join(after) or "end"
    return events[i + 1].event_type if i + 1 < len(events) else "end"


def _alternative(branch: BranchMark | None) -> str:
    if branch is None:
        return ""
    score = "" if branch.score is None else f", score {branch.score:.3f}"
    agent = "" if branch.agent is None else f"{branch.agent}'s "  # a crossed sample
    return f"{agent}{branch.index + 1} of {branch.of}, {'kept' if branch.kept else 'pruned'}{score}"


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
    replica: int = typer.Option(
        1, "--replica", **BOUNDS["replica"].option(), help="Replica number in the agent's pool."
    ),
    data: Path | None = DATA,
) -> None:
    """Show a role's prompt on the first task, with an empty team context.

    Example:

      srpo-dsl render workflows/math_routed.srpo --role solver
    """
    wf = load_checked(workflow)
    if role not in wf.graph.agents:
        raise CliError(f"no agent `{role}` in {workflow} (agents: {', '.join(wf.graph.agents)})")
    print(wf.render_prompt(role, replica, data))
