"""The bench's parts, as the bench's own process runs them: each prints its title and table header, then
runs its cases (a child process each, or one for the rollout part's generators), each row printed as its
case ends; a case that cannot start (no model, no time, a signal) is recorded and printed as skipped."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpubench import budget
from gpubench.budget import Clock
from gpubench.figures import async_figures, team_figures, update_figures
from gpubench.procs import Outcome, run_child
from gpubench.records import Recorder, case_record
from gpubench.report import GENERATORS, header, rollout_ratios, row
from gpubench.train import TrainCase, run_train

CHILD = Path(__file__).resolve().parent / "child.py"
LORA = {"4b"}  # shapes trained through LoRA adapters (`lora(r = 16)` on the policy): the base stays frozen
LONG_TOKENS = 512  # the `long` part's response length: 128 rows x 512 tokens, the memory goal's shape
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 FLOP/s by GPU name
ASYNC_CELLS = {"sync": {}, "async S=1": {"rollout_workers": 1, "max_staleness": 1},
               "async S=2": {"rollout_workers": 1, "max_staleness": 2}}  # fmt: skip
SOLVER = """workflow gpu_bench
policy lm = hf("MODEL") with (temperature = 1.0)
task arith(n = 4096, seed = 0, max_operand = 99, eval_n = 8)
agent solver uses lm prompt "solver.j2" emits boxed with (max_tokens = TOKENS)
aggregate solver
reward exact_match(solver, task.answer) invalid -0.1
train with (objective = srpo, group = GROUP, batch = BATCH, lr = 1e-6, steps = 1)
"""
TEAM = """workflow gpu_bench_team
policy lm = hf("MODEL") with (temperature = 1.0, max_tokens = TOKENS)
task arith(n = 4096, seed = 0, max_operand = 99, eval_n = 8)
agent router     uses lm prompt "solver.j2" emits route(solver) with (max_tokens = 16)
agent solver[3]  uses lm prompt "solver.j2" emits boxed
agent verifier   uses lm prompt "solver.j2" emits verdict(approve, reject) with (max_tokens = 16)
agent aggregator uses lm prompt "solver.j2" emits final_boxed
repeat at most 2 {
    route router
    parallel solver by router
    verify verifier
} until verifier == approve
aggregate aggregator
reward exact_match(aggregator, task.answer) invalid -0.1
train with (objective = srpo, set_norm = sqrt, group = GROUP, batch = BATCH, lr = 1e-6, steps = 1)
"""


@dataclass
class Bench:
    """What every part needs: the run's arguments, records, clock and scratch folder."""

    args: argparse.Namespace
    rec: Recorder
    clock: Clock
    scratch: Path


@dataclass
class Model:
    """One size's model and workflows; `figures` its build record's (None, and `why_not`, when unbuilt)."""

    size: str
    path: Path
    workflows: dict[str, Path]
    figures: dict[str, Any] | None = None
    why_not: str | None = None

    def gate(self, clock: Clock, estimate_s: float) -> str | None:
        """Why a case on this model must not start (the run stopping first, then no model), or None."""
        return clock.stop_reason() or self.why_not or clock.gate(estimate_s)


def write_workflow(folder: Path, text: str, model: Path, sizes: dict[str, Any], lora: bool = False) -> Path:
    """The bench's workflow `text` on `model` with `sizes` (TOKENS, GROUP, BATCH; LoRA on the policy)."""
    folder.mkdir(parents=True, exist_ok=True)
    if lora:
        text = text.replace('hf("MODEL")', 'hf("MODEL") lora(r = 16, alpha = 32)')
    (folder / "solver.j2").write_text("{{ task.question }}=")
    for key, value in {"MODEL": model, **sizes}.items():
        text = text.replace(key, str(value))
    path = folder / "bench.srpo"
    path.write_text(text)
    return path


def child(b: Bench, kind: str, size: str, spec: dict[str, Any]) -> Outcome:
    """`child.py KIND` with `spec` (and where to record), under the run's clock."""
    folder = b.scratch / size / kind
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.json"
    path.write_text(json.dumps(spec | {"size": size, "device": b.args.device, "records": str(b.rec.path),
                                       "fields": b.rec.fields}))  # fmt: skip
    return run_child([sys.executable, str(CHILD), kind, str(path)], folder / "log.txt", b.clock)


def fill_missing(
    b: Bench, part: str, size: str, cases: dict[str, str], outcome: Outcome, stats: bool = False
) -> None:
    """Records (and rows) for the cases a child process left without one: the first was running when it
    ended (failed or stopped), the others never started."""
    done = b.rec.cases(part, size)
    missing = [key for key in cases if key not in done]
    status = "failed" if outcome.status == "done" else outcome.status
    for i, key in enumerate(missing):
        if i == 0:
            record = case_record(part, size, key, status, note=outcome.note or "its process wrote no record")
        else:
            record = case_record(part, size, key, "skipped", note=f"not reached: its process {status}")
        b.rec.case(record, row(part, cases[key], record, stats))


def build(b: Bench, size: str) -> Model:
    """The size's workflows, then its random model (its own process); the build record's figures."""
    a, folder = b.args, b.scratch / size
    path, lora = folder / f"qwen3-{size}", size in LORA
    sizes = {"TOKENS": a.tokens, "GROUP": a.group, "BATCH": a.batch}
    workflows = {
        "solver": write_workflow(folder / "solver", SOLVER, path, sizes, lora),
        "long": write_workflow(folder / "long", SOLVER, path, sizes | {"TOKENS": LONG_TOKENS}, lora),
        "team": write_workflow(folder / "team", TEAM, path, sizes, lora),
    }
    model = Model(size, path, workflows)
    print(f"### {size}\n", flush=True)
    if (why := b.clock.gate(budget.build_s(size))) is None:
        spec = {"model": str(path), "workflow": str(workflows["solver"]), "batch": a.batch}
        outcome = child(b, "build", size, spec)
    if "model" not in b.rec.cases("build", size):  # skipped, or its process wrote no record
        status = "skipped" if why else ("failed" if outcome.status == "done" else outcome.status)
        note = why or outcome.note or "its process wrote no record"
        b.rec.case(case_record("build", size, "model", status, note=note), f"model: {status}, {note}\n")
    record = b.rec.cases("build", size)["model"]
    model.figures = record.get("figures") if record["status"] == "done" else None
    ended = "failed" if record["status"] == "failed" else f"was {record['status']}"
    model.why_not = None if model.figures else f"no model: its build {ended}"
    return model


def rollout_part(b: Bench, m: Model) -> None:
    a = b.args
    cases = {key: GENERATORS[key] for key in a.generators}
    print(f"Rollout, {a.rollout_batch * a.group} rows ({a.rollout_batch} prompts × {a.group}), up to {a.tokens} "
          f"new tokens each; the first call, then the median of {a.repeats} timed call(s):\n")  # fmt: skip
    first = budget.rollout_s(a.generators[0], m.size, a.rollout_batch * a.group, a.tokens, a.repeats)
    why = m.gate(b.clock, budget.ROLLOUT_START_S + first)
    stats = why is None and m.figures["decode_stats"]
    print(header("rollout", stats), flush=True)
    if why is not None:
        for key, label in cases.items():
            record = case_record("rollout", m.size, key, "skipped", note=why)
            b.rec.case(record, row("rollout", label, record))
    else:
        spec = {"model": str(m.path), "workflow": str(m.workflows["solver"]), "deadline": b.clock.deadline()}
        spec |= {k: getattr(a, k) for k in ("rollout_batch", "group", "tokens", "repeats", "generators")}
        fill_missing(b, "rollout", m.size, cases, child(b, "rollout", m.size, spec), stats)
    if ratios := rollout_ratios(b.rec.cases("rollout", m.size)):
        print("\n" + "\n".join(ratios))
    print(flush=True)


def trained(b: Bench, m: Model, c: TrainCase, estimate_s: float) -> dict[str, Any]:
    folder = b.scratch / m.size / f"{c.part}-{c.case}".replace(" ", "_").replace("=", "")
    why = m.gate(b.clock, estimate_s)
    return run_train(c, m.size, folder, b.rec, b.clock, b.args.device, b.args.decode, why)


def run_options(steps: int) -> dict[str, Any]:
    """A trained case's steps, and an evaluation (step 0 and the last) and checkpoint shrunk to a minimum."""
    return {"steps": steps, "eval_every": steps + 1, "eval_size": 1, "eval_k": 1, "save_every": steps + 1}


def update_summary(b: Bench, m: Model) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """The update's figures over its steps, with the model's parameters and prompt tokens and the GPU's peak."""
    f, device = m.figures or {}, b.rec.fields["device"] or ""
    peak = next((flops for name, flops in PEAK_BF16.items() if name in device), None)
    return lambda steps: update_figures(steps, f.get("prompt_tokens", 0.0), f.get("params", 0), peak)


def update_part(b: Bench, m: Model) -> None:
    a = b.args
    print(f"Update (`srpo-dsl train`, {a.batch} prompts × {a.group}, {a.tokens} new tokens, {a.steps} steps, "
          f"decode `{a.decode}`; medians after the first step):\n\n{header('update')}", flush=True)  # fmt: skip
    for zero in a.zero:
        options = run_options(a.steps) | {"zero": zero} | a.options
        c = TrainCase("update", f"ZeRO-{zero}", f"srpo-dsl ZeRO-{zero}", m.workflows["solver"], options,
                      update_summary(b, m))  # fmt: skip
        kind = "zero3" if zero == 3 else "update"
        trained(b, m, c, budget.train_s(kind, m.size, a.batch * a.group, a.tokens, a.steps))
    print(flush=True)


def long_part(b: Bench, m: Model) -> None:
    a, rows = b.args, b.args.batch * b.args.group
    print(f"The memory case (`srpo-dsl train`, {rows} rows × {LONG_TOKENS} new tokens, ZeRO 0, {a.steps} steps; "
          f"goal on one H100/H200: peak ≤ 24 GiB):\n\n{header('long')}", flush=True)  # fmt: skip
    options = run_options(a.steps) | {"zero": 0} | a.options
    c = TrainCase("long", "ZeRO-0", f"srpo-dsl ZeRO-0, {rows} × {LONG_TOKENS}", m.workflows["long"], options,
                  update_summary(b, m))  # fmt: skip
    trained(b, m, c, budget.train_s("update", m.size, rows, LONG_TOKENS, a.steps))
    print(flush=True)


def trl_part(b: Bench, m: Model) -> None:
    """TRL's GRPOTrainer, beside srpo-dsl's ZeRO-0 row of the update part (where it ran)."""
    a = b.args
    print(f"TRL's GRPOTrainer on the same model, prompts and settings ({a.steps} steps):\n\n{header('trl')}",
          flush=True)  # fmt: skip
    if importlib.util.find_spec("trl") is None:
        why = "trl is not installed (the `bench` extra)"
    elif m.size in LORA:
        why = "not compared on the LoRA shape"
    else:
        why = m.gate(b.clock, budget.train_s("trl", m.size, a.batch * a.group, a.tokens, a.steps))
    if why is not None:
        record = case_record("trl", m.size, "trl", "skipped", note=why)
        b.rec.case(record, row("trl", "TRL GRPOTrainer", record))
    else:
        spec = {"model": str(m.path), "workflow": str(m.workflows["solver"])}
        spec |= {k: getattr(a, k) for k in ("batch", "group", "steps")}
        fill_missing(b, "trl", m.size, {"trl": "TRL GRPOTrainer"}, child(b, "trl", m.size, spec))
    ours = b.rec.cases("update", m.size).get("ZeRO-0", {}).get("figures")
    if ours:
        same = {"steps": ours["steps"], "step_ms": ours["step_ms"], "tokens_per_s": ours["step_tokens_per_s"]}
        print(row("trl", "srpo-dsl ZeRO-0 (the update part's)", {"status": "done", "figures": same}))
    print(flush=True)


def micro_batching(args: dict[str, Any]) -> dict[str, Any]:
    """The team's micro-batches (`--team-micro-batches`), then every `--option` (a token budget replaces the
    count: `max_tokens_per_micro_batch` and `micro_batches` are one choice)."""
    options = args["options"]
    count = {} if "max_tokens_per_micro_batch" in options else {"micro_batches": args["team_micro_batches"]}
    return count | options


def team_part(b: Bench, m: Model) -> None:
    a = b.args
    print("A team shaped like `math_routed.srpo` (router, up to 3 solvers in one active set, verifier, at most "
          f"2 rounds, aggregator), {a.steps} steps:\n\n{header('team')}", flush=True)  # fmt: skip
    options = run_options(a.steps) | micro_batching(vars(a))
    c = TrainCase("team", "team", "math_routed shape", m.workflows["team"], options, team_figures)
    trained(b, m, c, budget.train_s("team", m.size, a.batch * a.group, a.tokens, a.steps))
    print(flush=True)


def async_part(b: Bench, m: Model) -> None:
    """The team trained synchronously, then with one rollout worker on the same device (S = 1, 2): steps
    per second after the first step (one step more than --steps), against the synchronous run's."""
    a, base = b.args, None
    print("The team, synchronous and with one rollout worker on the same device (`rollout_workers = 1`), "
          f"{a.steps + 1} steps:\n\n{header('async')}", flush=True)  # fmt: skip
    for cell, extra in ASYNC_CELLS.items():
        options = run_options(a.steps + 1) | micro_batching(vars(a)) | extra
        c = TrainCase("async", cell, cell, m.workflows["team"], options, async_figures, base)
        record = trained(b, m, c, budget.train_s("team", m.size, a.batch * a.group, a.tokens, a.steps + 1))
        if cell == "sync":
            base = (record.get("figures") or {}).get("steps_per_s")
    print(flush=True)


PARTS = {
    "rollout": rollout_part,
    "update": update_part,
    "long": long_part,
    "trl": trl_part,
    "team": team_part,
    "async": async_part,
}  # fmt: skip  (the order they run in: by importance)
