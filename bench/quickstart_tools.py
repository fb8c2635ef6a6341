"""When does the tool quickstart's agent call its calculator? Before and after training, by difficulty.

    srpo-dsl train workflows/quickstart_tools.srpo --out runs/quickstart_tools
    python bench/quickstart_tools.py runs/quickstart_tools
    python bench/quickstart_tools.py --smoke     # a check that it runs: trains 1 step of 2 x 2 first, 4 questions

Runs the workflow of the run (its config's) through the executor on the task's held-out
questions (the run's `eval_size`, `eval_k` samples each, the trainer's evaluation seeds) with
the initial policy (the model the run started from) and the trained one (the latest
checkpoint, exported to RUN/export first unless it is there), and prints per difficulty:

- accuracy: the final answer is right (Avg@k);
- tool: the episode asked the calculator at least once;
- direct: its first turn answered;
- read right: of the episodes that got a result and answered, the answer is the last result;
- invalid: an output broke its contract.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from srpo_dsl.lang.compile.graph import EventNode
from srpo_dsl.rl.loop.checkpoint import latest_checkpoint
from srpo_dsl.runtime.actions import action_of
from srpo_dsl.runtime.episode import Episode
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.metrics import is_correct
from srpo_dsl.runtime.setup import CompiledWorkflow, build_backends, build_tools, load_workflow, task_data
from srpo_dsl.seeds import seed_of

COLUMNS = ("accuracy", "tool", "direct", "read right", "invalid")
WORKFLOW = Path(__file__).resolve().parents[1] / "workflows" / "quickstart_tools.srpo"
SMOKE = ["--steps", "1", "--batch", "2", "--group", "2", "--option", "eval_size=4", "--option", "eval_k=1"]


def outcome(ep: Episode) -> dict[str, float | None]:
    """One episode's columns (1/0; `read right` None where it does not apply)."""
    members = [m for e in ep.events for m in e.members]
    first = action_of(members[0]) if members else None
    results = [o["result"] for e in ep.events for o in e.observations if "result" in o]
    read = None if not results or ep.answer is None else float(str(ep.answer) == results[-1])
    return {
        "accuracy": float(is_correct(ep.reward)),
        "tool": float(ep.tool_calls > 0),
        "direct": float(first == "answer"),
        "read right": read,
        "invalid": float(ep.invalid_actions > 0),
    }


def evaluate(
    wf: CompiledWorkflow, model: str, tasks: list[dict], k: int, seed: int
) -> dict[str, dict[str, float]]:
    """Per difficulty (and `all`), each column's mean over the episodes it applies to."""
    backends = build_backends(wf, "hf", dict.fromkeys(wf.graph.policies, model))
    episodes = Executor(wf.graph, backends, wf.renderer(), build_tools(wf)).run(tasks, samples=k, seed=seed)
    cells: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for ep in episodes:
        groups = {ep.task.get("difficulty", "all"), "all"}
        for column, value in outcome(ep).items():
            for group in groups if value is not None else ():
                cells[group][column].append(value)
    return {g: {c: sum(v) / len(v) for c, v in cols.items()} for g, cols in cells.items()}


def trained_model(run: Path) -> str:
    """The trained policy's exported folder (exported from the latest checkpoint if missing)."""
    folder = run / "export"
    if not folder.is_dir():
        subprocess.run([sys.executable, "-m", "srpo_dsl", "export", str(run)], check=True)
    [merged] = sorted(folder.glob("*/merged"))
    return str(merged)


def table(before: dict, after: dict) -> str:
    """Difficulty x columns, before -> after, in percent."""
    groups = [g for g in ("easy", "medium", "hard") if g in before] + ["all"]
    head = f"| difficulty | {' | '.join(COLUMNS)} |"
    rows = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for g in groups:
        cells = [f"{100 * before[g].get(c, 0):.1f} -> {100 * after[g].get(c, 0):.1f}" for c in COLUMNS]
        rows.append(f"| {g} | {' | '.join(cells)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", type=Path, nargs="?", help="a run folder written by `srpo-dsl train`")
    parser.add_argument(
        "--smoke", action="store_true", help="a check that it runs: on a 1-step run it trains"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            train = [sys.executable, "-m", "srpo_dsl", "train", str(WORKFLOW), "--out", str(run), "-q"]
            subprocess.run([*train, "--device", "cpu", *SMOKE], check=True)
            return report(run)
    if args.run is None:
        parser.error("a run folder is needed (or --smoke)")
    return report(args.run)


def report(run: Path) -> int:
    """The table of the run's workflow on its held-out questions, before and after training."""
    config = json.loads((run / "config.json").read_text())
    opts = config["options"]
    wf = load_workflow(Path(config["workflow"]))
    if not any(isinstance(v, EventNode) and v.agent.actions for v in wf.graph.event_nodes):
        raise SystemExit(f"error: {config['workflow']} has no acting agent")
    checkpoint = latest_checkpoint(run)
    if checkpoint is None:
        raise SystemExit(f"error: {run} has no checkpoint yet")
    step = int(checkpoint.name.removeprefix("step-"))
    tasks = task_data(wf, split="eval")[: opts["eval_size"]]
    [initial] = set(config["models"].values())
    k, seed = opts["eval_k"], opts["seed"]
    before = evaluate(wf, initial, tasks, k, seed_of("eval", seed, 0, 0))
    after = evaluate(wf, trained_model(run), tasks, k, seed_of("eval", seed, step, 0))
    print(f"{wf.name}: {len(tasks)} held-out questions x {k} samples, step 0 -> {step} of {run}")
    print(table(before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
