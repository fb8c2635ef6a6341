"""LoRA adapters on one frozen base against full model copies: memory, step time, generation (CPU).

    python bench/adapters_bench.py               # roles 1, 3, 5 on a ~103M-parameter model; 12 steps x 3
    python bench/adapters_bench.py --quick       # a smoke run (the tiny model's shape, 2 roles)

Memory. A team of N roles (N = 1, 3, 5 agents, one after another, each prompted `S a+b=`,
at most 8 new tokens; the last one's boxed answer is rewarded; 1 prompt x 2 rollouts per
step, each event in a micro-batch of its own, so that activations stay small next to the weights
and the same whatever N), built five ways, each in a fresh
process that prepares the run as `srpo-dsl train` does and runs 4 training steps (rollout,
update, weight sync) before anything is measured:
  full      N trainable `hf(MODEL)` policies: N models, N DeepSpeed engines (math_nonsharing.srpo);
  shared    one trainable `hf(MODEL)` policy used by every role (quickstart.srpo);
  lora      one trainable `hf(MODEL) lora(r = 16, alpha = 32)` policy used by every role;
  adapters  `policy base = hf(MODEL) frozen` and N `adapter(base, r = 16, alpha = 32)` policies
            (quickstart_adapters.srpo): one model, one PeftModel, one engine;
  base      the reference: the frozen base alone serving every role, one rollout of the same
            first step (no engine, no update).
MODEL is a random-init Llama (hidden 1024, 8 layers, ~103M parameters, fp32) with the embedded
model's tokenizer, built once into the cache (`--cache`), so that weights dominate memory.
Parameter bytes: numel x element size of every distinct parameter tensor reachable from the
policies (modules and rollout models; a tensor shared by several counts once). AdamW state:
its two moments (exp_avg, exp_avg_sq) over every engine. Peak RSS: the process's
`ru_maxrss` at the end (loading included). "One base plus the adapters" is the reference
process's peak RSS plus the adapters' training state, 4 x their parameter bytes (the
parameters, their gradients, AdamW's two moments); goal: adapters' peak RSS <= 1.1 x that.
The trainer's per-step `time` of steps 2-4 (median) is reported too: shared against adapters
on this model.

Step time. The quickstart team on the embedded model, its own settings (32 prompts x 8
rollouts per step): workflows/quickstart.srpo (one shared trainable policy) against
workflows/quickstart_adapters.srpo (an adapter per role on the frozen model), each run in a
fresh process through `srpo_dsl.rl.loop.trainer.train` (its plan from `plan_file`) for S + 1 steps; the first step (warm-up)
is dropped, the trainer's per-step `time` (rollout + update + weight sync) is taken as the
median of the others, then the median over R runs, the two alternating order run by run.
Goal: adapters <= 1.2 x shared.

Generation. The embedded model hosting the three adapters of quickstart_adapters.srpo, 3 x 64
requests (16 solver prompts x 4 samples per adapter, at most 12 new tokens): one `generate`
call with the adapters mixed (peft `adapter_names`, what the executor sends when roles of
different adapters act together) against one call per adapter; median of several runs,
alternating.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_bench import CONTEXT, cpu_name, default_threads

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("full", "shared", "lora", "adapters", "base")
MIB = 2**20
SOLVER = "quickstart/solver.j2"


@dataclass(frozen=True)
class Shape:
    """A Llama's size; vocabulary and special tokens are the embedded model's."""

    hidden: int
    layers: int
    intermediate: int
    heads: int


@dataclass(frozen=True)
class Plan:
    """What one run of the bench measures, and how much."""

    shape: Shape
    roles: tuple[int, ...]
    model_steps: int  # training steps of each memory case (the first untimed)
    steps: int  # timed steps per step-time run (one more runs first, untimed)
    repeats: int  # step-time runs per side
    prompts: int  # generation: prompts per adapter (x `samples` requests each)
    samples: int
    gen_runs: int


FULL = Plan(
    Shape(1024, 8, 2816, 16), (1, 3, 5), model_steps=4, steps=12, repeats=3, prompts=16, samples=4, gen_runs=7
)
QUICK = Plan(Shape(128, 2, 256, 4), (2,), model_steps=2, steps=2, repeats=1, prompts=4, samples=2, gen_runs=2)


# --- the model and the teams ----------------------------------------------------------------


def bench_model(shape: Shape, cache: Path) -> Path:
    """A random-init Llama of `shape` with the embedded model's tokenizer, saved once under `cache`."""
    path = cache / f"llama-h{shape.hidden}-l{shape.layers}-i{shape.intermediate}"
    if (path / "config.json").exists():
        return path
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    from srpo_dsl.models.specs import resolve_model_spec

    tiny = resolve_model_spec("builtin:tiny")
    config = AutoConfig.from_pretrained(tiny)
    config.update(
        {
            "hidden_size": shape.hidden,
            "num_hidden_layers": shape.layers,
            "intermediate_size": shape.intermediate,
            "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.heads,
            "head_dim": shape.hidden // shape.heads,
        }
    )
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".building-"))
    LlamaForCausalLM(config).save_pretrained(tmp)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(tmp)
    os.replace(tmp, path)  # config.json appears with the finished folder
    return path


def team_text(kind: str, roles: int, model: str) -> str:
    """The N-role workflow of the memory cases (see the module docstring)."""
    if kind == "adapters":
        policies = [f'policy base = hf("{model}") frozen']
        policies += [f"policy p{k} = adapter(base, r = 16, alpha = 32)" for k in range(1, roles + 1)]
        uses = [f"p{k}" for k in range(1, roles + 1)]
    elif kind == "full":
        policies = [f'policy p{k} = hf("{model}")' for k in range(1, roles + 1)]
        uses = [f"p{k}" for k in range(1, roles + 1)]
    elif kind == "shared":
        policies, uses = [f'policy lm = hf("{model}")'], ["lm"] * roles
    elif kind == "lora":
        policies, uses = [f'policy lm = hf("{model}") lora(r = 16, alpha = 32)'], ["lm"] * roles
    else:
        policies, uses = [f'policy base = hf("{model}") frozen'], ["base"] * roles
    agents = [
        f'agent a{k} uses {u} prompt "{SOLVER}" emits boxed with (max_tokens = 8)'
        for k, u in enumerate(uses, 1)
    ]
    steps = [f"parallel a{k}" for k in range(1, roles)] + [f"aggregate a{roles}"]
    head = [f"workflow team_{kind}_{roles}", *policies, "task arith(n = 64, seed = 0, eval_n = 8)"]
    reward = f"reward exact_match(a{roles}, task.answer) invalid -0.1"
    events = 2 * roles  # 1 prompt x 2 rollouts x `roles` singleton events: one per micro-batch
    train = f"train with (objective = srpo, group = 2, batch = 1, lr = 1e-5, eval_size = 1, micro_batches = {events})"
    return "\n".join([*head, *agents, *steps, reward, train, ""])


def write_team(folder: Path, kind: str, roles: int, model: str) -> Path:
    """The workflow file and the prompt template it names, in `folder`."""
    (folder / "quickstart").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "workflows" / SOLVER, folder / SOLVER)
    path = folder / f"team_{kind}_{roles}.srpo"
    path.write_text(team_text(kind, roles, model), encoding="utf-8")
    return path


# --- memory (each case in its own process) -----------------------------------------------------


def quiet(threads: int) -> None:
    """Library logging off and the torch thread count, in a worker process."""
    import logging
    import warnings

    import torch
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore")
    for name in ("deepspeed", "DeepSpeed", "transformers", "peft", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(threads)


def serve_base(path: Path, device: str) -> dict:
    """The reference: the frozen base serving every role, one rollout of step 1's prompts."""
    from srpo_dsl.rl.distributed.data_order import step_prompts
    from srpo_dsl.rl.distributed.process_group import init_distributed
    from srpo_dsl.rl.engines.policies import build_policies
    from srpo_dsl.rl.loop.prepare import model_paths
    from srpo_dsl.runtime.executor import Executor
    from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
    from srpo_dsl.seeds import seed_of

    wf = load_workflow(path)
    opts, dist = wf.graph.train, init_distributed(device)
    policies = build_policies(wf.graph, model_paths(wf.graph, {}, dist), opts, dist, {})
    executor = Executor(wf.graph, {n: p.backend for n, p in policies.items()}, wf.renderer(), build_tools(wf))
    tasks = task_data(wf, split="train")
    prompts = [tasks[i] for i in step_prompts(len(tasks), opts.batch, 1, opts.seed)]
    executor.run(prompts, samples=opts.group, seed=seed_of("rollout", opts.seed, 1))
    return policies


def train_steps(path: Path, steps: int, device: str) -> tuple[dict, list[float]]:
    """Prepare the run as `srpo-dsl train` does and run its first `steps` steps; the policies and step times."""
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.prepare import prepare_run
    from srpo_dsl.rl.loop.trainer import train_step

    run = prepare_run(plan_file(path, path.parent / "run", device=device))
    return run.policies, [train_step(run, step)["time"] for step in range(1, steps + 1)]


def tensor_bytes(tensors: Any) -> int:
    """Bytes of the distinct tensors (by storage address) among `tensors`."""
    sizes = {t.data_ptr(): t.numel() * t.element_size() for t in tensors if t.numel()}
    return sum(sizes.values())


def adamw_moments(engine: Any) -> list:
    """exp_avg and exp_avg_sq of every parameter the engine's AdamW has stepped."""
    states = engine.optimizer.state.values()
    return [s[k] for s in states for k in ("exp_avg", "exp_avg_sq") if k in s]


def memory_case(kind: str, roles: int, model: str, steps: int, device: str, threads: int) -> dict:
    """One (kind, roles) case in this fresh process: build, `steps` training steps (the reference: one
    rollout), measure; the step times after the first."""
    import torch

    quiet(threads)
    folder = Path(tempfile.mkdtemp(prefix=f"adapters-bench-{kind}{roles}-"))
    try:
        path = write_team(folder, kind, roles, model)
        policies, times = (
            (serve_base(path, device), []) if kind == "base" else train_steps(path, steps, device)
        )
        modules = {id(m): m for p in policies.values() for m in (p.module, p.backend.model)}.values()
        params = [t for m in modules for t in m.parameters()]
        engines = {id(p.engine): p.engine for p in policies.values() if p.engine is not None}.values()
        moments = [t for e in engines for t in adamw_moments(e)]
        if engines and not moments:
            raise SystemExit(f"{kind}/{roles}: the training step built no AdamW state")
        return {
            "kind": kind,
            "roles": roles,
            "param_bytes": tensor_bytes(params),
            "trainable_bytes": tensor_bytes(t for t in params if t.requires_grad),
            "adamw_bytes": tensor_bytes(moments),
            "engines": len(engines),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_gpu_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None,
            "step_times": times[1:],
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# what every case imports, imported once by the fork server that forks each case's process
PRELOAD = ["__main__", "torch", "transformers", "peft", "srpo_dsl.rl.loop.trainer", "srpo_dsl.backends.hf"]


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a fresh process (its own peak RSS, its own process group), forked from a server that
    imported the libraries once (PRELOAD: nothing in it starts a thread or touches a device), so each
    case does not pay their imports again."""
    import multiprocessing as mp

    context = mp.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(fn, *args).result()


def measure_memory(plan: Plan, model: str, device: str, threads: int) -> list[dict]:
    rows = []
    for roles in plan.roles:
        for kind in KINDS:
            rows.append(in_child(memory_case, kind, roles, model, plan.model_steps, device, threads))
            mib = rows[-1]["peak_rss_bytes"] / MIB
            print(f"memory {kind} x{roles}: peak RSS {mib:.0f} MiB", file=sys.stderr, flush=True)
    return rows


# --- step time -----------------------------------------------------------------------------------


def steptime_run(workflow: str, steps: int, device: str, threads: int) -> dict:
    """One fresh training run of `steps` + 1 steps; the per-step times and tokens after the first."""
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import train

    quiet(threads)
    out = Path(tempfile.mkdtemp(prefix="adapters-bench-steps-"))
    try:
        overrides = {
            "steps": steps + 1,
            "eval_every": 10**6,
            "save_every": 10**6,
            "eval_size": 1,
            "eval_k": 1,
        }
        history = train(plan_file(ROOT / workflow, out / "run", overrides, device=device), progress=False)[1:]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {
        "step_times": [row["time"] for row in history],
        "tokens": [row["response_length"] * row["num_events"] * row["mean_set_size"] for row in history],
    }


STEPTIME_SIDES = {"shared": "workflows/quickstart.srpo", "adapters": "workflows/quickstart_adapters.srpo"}


def measure_steptime(plan: Plan, device: str, threads: int) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {side: [] for side in STEPTIME_SIDES}
    for rep in range(plan.repeats):
        for side in list(STEPTIME_SIDES)[:: 1 if rep % 2 == 0 else -1]:
            run = in_child(steptime_run, STEPTIME_SIDES[side], plan.steps, device, threads)
            runs[side].append(run)
            median = statistics.median(run["step_times"])
            print(f"steps {side} run {rep + 1}: median {1000 * median:.0f} ms", file=sys.stderr, flush=True)
    return runs


# --- generation: mixed adapters in one call against one call per adapter -------------------------


def generation_requests(plan: Plan) -> dict[str, list]:
    """Per adapter of quickstart_adapters.srpo: its own solver prompts, `samples` requests each."""
    from srpo_dsl.backends.base import GenRequest
    from srpo_dsl.runtime.setup import load_workflow, task_data

    wf = load_workflow(ROOT / STEPTIME_SIDES["adapters"])
    tasks, renderer = task_data(wf, split="train"), wf.renderer()
    out = {}
    for k, adapter in enumerate(wf.graph.adapters_on("base")):
        texts = [
            renderer.render(SOLVER, {**CONTEXT, "role": "solver", "task": t})
            for t in tasks[k * plan.prompts : (k + 1) * plan.prompts]
        ]
        out[adapter] = [GenRequest(p, 12, adapter=adapter) for p in texts for _ in range(plan.samples)]
    return out


def generation_case(plan: Plan, threads: int) -> dict:
    """Seconds and generated tokens per run of both ways, alternating which goes first."""
    from srpo_dsl.backends.hf import HFBackend
    from srpo_dsl.lang import load_graph
    from srpo_dsl.models.specs import resolve_model_spec
    from srpo_dsl.rl.engines.adapters import with_adapters

    quiet(threads)
    plain = HFBackend(resolve_model_spec("builtin:tiny"))  # loads the model and its tokenizer
    adapters = load_graph(ROOT / STEPTIME_SIDES["adapters"]).adapters_on("base")
    backend = HFBackend(with_adapters(plain.model, adapters), tokenizer=plain.tokenizer)
    requests = generation_requests(plan)
    mixed = [r for group in requests.values() for r in group]
    ways = {
        "mixed": lambda seed: backend.generate(mixed, seed=seed),
        "per_adapter": lambda seed: [
            x for group in requests.values() for x in backend.generate(group, seed=seed)
        ],
    }
    runs: dict[str, dict[str, list[float]]] = {w: {"seconds": [], "tokens": []} for w in ways}
    for rep in range(plan.gen_runs + 1):  # the first round warms up
        for way in list(ways)[:: 1 if rep % 2 == 0 else -1]:
            t0 = time.perf_counter()
            results = ways[way](rep)
            if rep:
                runs[way]["seconds"].append(time.perf_counter() - t0)
                runs[way]["tokens"].append(float(sum(len(r.response_token_ids) for r in results)))
    return {"requests": len(mixed), "adapters": len(requests), "runs": runs}


# --- the report ----------------------------------------------------------------------------------


def memory_table(rows: list[dict]) -> list[str]:
    """One line per (roles, layout): bytes held and the process's peak RSS (and peak GPU memory on CUDA)."""
    gpu = any(r["peak_gpu_bytes"] is not None for r in rows)
    names = {
        "full": "full copies",
        "shared": "one shared policy",
        "lora": "one shared LoRA",
        "adapters": "base + adapters",
        "base": "base alone (reference)",
    }
    out = [
        "| roles | layout | engines | parameters (MiB) | trainable (MiB) | AdamW moments (MiB) | peak RSS (MiB) |"
        + (" peak GPU (MiB) |" if gpu else ""),
        "|---:|---|---:|---:|---:|---:|---:|" + ("---:|" if gpu else ""),
    ]
    for r in rows:
        mib = [r[k] / MIB for k in ("param_bytes", "trainable_bytes", "adamw_bytes", "peak_rss_bytes")]
        line = f"| {r['roles']} | {names[r['kind']]} | {r['engines']} | " + " | ".join(
            f"{x:,.1f}" for x in mib
        )
        out.append(line + " |" + (f" {r['peak_gpu_bytes'] / MIB:,.0f} |" if gpu else ""))
    return out


def ratio_table(rows: list[dict]) -> list[str]:
    """Per role count: one base plus the adapters (the reference), and the peak-RSS ratios; with the
    `lora` layout, also against one shared LoRA trained on the same rows plus the other adapters' state."""
    by = {(r["kind"], r["roles"]): r for r in rows}
    lora = any(r["kind"] == "lora" for r in rows)
    out = [
        "| roles | one base + adapters (MiB) | base + adapters / (one base + adapters) | full copies / base + adapters |"
        + (" base + adapters / (one shared LoRA + the other adapters) |" if lora else ""),
        "|---:|---:|---:|---:|" + ("---:|" if lora else ""),
    ]
    for roles in sorted({r["roles"] for r in rows}):
        full, ada, base = by["full", roles], by["adapters", roles], by["base", roles]
        reference = base["peak_rss_bytes"] + 4 * ada["trainable_bytes"]  # + params, grads, 2 moments
        line = (
            f"| {roles} | {reference / MIB:,.1f} | {ada['peak_rss_bytes'] / reference:.3f} "
            f"| {full['peak_rss_bytes'] / ada['peak_rss_bytes']:.2f} |"
        )
        if lora:
            one = by["lora", roles]
            trained = one["peak_rss_bytes"] + 4 * (ada["trainable_bytes"] - one["trainable_bytes"])
            line += f" {ada['peak_rss_bytes'] / trained:.3f} |"
        out.append(line)
    return out


def model_steptime_table(rows: list[dict]) -> list[str]:
    """Per role count: the median step of the memory cases (after the first) and adapters / shared."""
    by = {(r["kind"], r["roles"]): 1000 * statistics.median(r["step_times"]) for r in rows if r["step_times"]}
    out = [
        "| roles | one shared policy (ms) | base + adapters (ms) | full copies (ms) | adapters / shared |",
        "|---:|---:|---:|---:|---:|",
    ]
    for roles in sorted({r["roles"] for r in rows}):
        shared, ada, full = by["shared", roles], by["adapters", roles], by["full", roles]
        out.append(f"| {roles} | {shared:.0f} | {ada:.0f} | {full:.0f} | {ada / shared:.2f} |")
    return out


def steptime_table(runs: Mapping[str, list[dict]]) -> list[str]:
    med = {s: statistics.median(statistics.median(r["step_times"]) for r in rs) for s, rs in runs.items()}
    tokens = {s: statistics.median(t for r in rs for t in r["tokens"]) for s, rs in runs.items()}
    names = {
        "shared": "one shared policy (quickstart.srpo)",
        "adapters": "adapter per role (quickstart_adapters.srpo)",
    }
    out = [
        "| team | median step (ms) | generated tokens/step (median) | ratio to shared |",
        "|---|---:|---:|---:|",
    ]
    for side in runs:
        out.append(
            f"| {names[side]} | {1000 * med[side]:.0f} | {tokens[side]:.0f} | {med[side] / med['shared']:.2f} |"
        )
    return out


def generation_table(gen: Mapping[str, Any]) -> list[str]:
    runs = gen["runs"]
    med = {w: statistics.median(r["seconds"]) for w, r in runs.items()}
    calls = {"mixed": 1, "per_adapter": gen["adapters"]}
    out = ["| way | calls | median (s) | generated tokens/s | time / mixed |", "|---|---:|---:|---:|---:|"]
    for way, r in runs.items():
        rate = statistics.median(t / s for t, s in zip(r["tokens"], r["seconds"]))
        out.append(f"| {way} | {calls[way]} | {med[way]:.3f} | {rate:.0f} | {med[way] / med['mixed']:.2f} |")
    return out


def report(plan: Plan, result: Mapping[str, Any]) -> list[str]:
    """The Markdown tables of the parts that ran, each under a title line."""
    lines = []
    if "memory" in result:
        rows = result["memory"]
        lines += [
            f"Memory after {plan.model_steps} training steps (MiB = 2^20 bytes):",
            "",
            *memory_table(rows),
        ]
        lines += ["", *ratio_table(rows), ""]
        lines += [f"Step time of the memory cases (median of steps 2-{plan.model_steps}):", ""]
        lines += [*model_steptime_table(rows), ""]
    if "steptime" in result:
        lines += [
            f"Step time of the quickstart team (median of {plan.repeats} run(s) x {plan.steps} steps):",
            "",
        ]
        lines += [*steptime_table(result["steptime"]), ""]
    if "generation" in result:
        gen = result["generation"]
        lines += [f"Generation ({gen['requests']} requests, median of {plan.gen_runs} runs):", ""]
        lines += [*generation_table(gen), ""]
    return lines


def machine_line(threads: int, why: str, device: str, load: list[float]) -> str:
    import peft
    import torch
    import transformers

    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"machine: {cpu_name()}, {ncpu} cores visible, {threads} torch thread(s) ({why}), load average (1 min) "
        f"{min(load):.1f}-{max(load):.1f} during the run; python {platform.python_version()}, torch "
        f"{torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}; device {device}"
    )


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: small model, few steps and runs")
    ap.add_argument("--parts", default="memory,steptime,generation", help="comma-separated parts to run")
    ap.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="of the memory and step-time parts"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: as train_bench.py)")
    ap.add_argument(
        "--cache", default=None, help="where the bench model is built once (default: the cache's bench/)"
    )
    ap.add_argument("--json", default=None, help="also write every measurement here")
    args = ap.parse_args()
    unknown = set(args.parts.split(",")) - {"memory", "steptime", "generation"}
    if unknown:
        ap.error(f"--parts: unknown part(s) {', '.join(sorted(unknown))} (memory, steptime, generation)")
    return args


def main() -> None:
    args = parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    from srpo_dsl.io import write_json
    from srpo_dsl.models.tiny import cache_root

    plan = QUICK if args.quick else FULL
    threads, why = (args.threads, "--threads") if args.threads else default_threads()
    parts, load = args.parts.split(","), [os.getloadavg()[0]]
    result: dict[str, Any] = {"plan": asdict(plan), "device": args.device, "threads": threads}
    if "memory" in parts:
        cache = Path(args.cache) if args.cache else cache_root() / "bench"
        cache.mkdir(parents=True, exist_ok=True)
        hf_logging.disable_progress_bar()
        model = str(bench_model(plan.shape, cache))
        result["memory"] = measure_memory(plan, model, args.device, threads)
        load.append(os.getloadavg()[0])
    if "steptime" in parts:
        result["steptime"] = measure_steptime(plan, args.device, threads)
        load.append(os.getloadavg()[0])
    if "generation" in parts:
        result["generation"] = in_child(generation_case, plan, threads)
        load.append(os.getloadavg()[0])
    result["load"] = load
    result["machine"] = machine_line(threads, why, args.device, load)
    print(result["machine"], "", *report(plan, result), sep="\n")
    if args.json:
        write_json(Path(args.json), result)


if __name__ == "__main__":
    main()
