"""The GPU path, measured: rollouts, updates under ZeRO 0 and 3, a team's step, and TRL side by side.

    python bench/gpu_bench.py                    # CUDA, bf16: Qwen3-shaped 0.6B and 1.7B models
    python bench/gpu_bench.py --sizes 0.6b --parts rollout,update
    python bench/gpu_bench.py --cpu              # a tiny config on CPU, fp32 (what CI runs)
    python bench/gpu_bench.py --option pack_rows=true --option max_tokens_per_micro_batch=16384

Nothing is downloaded: each model is a random initialisation of a real architecture built from
its config (Qwen3-0.6B and Qwen3-1.7B shapes, their 151,936-token vocabulary, tied embeddings),
saved with the shipped tokenizer (`builtin:tiny`; prompts use its ids, and sampled ids outside
it decode to nothing). A random model rarely emits end-of-sequence, so every response runs to
`--tokens`: throughput is measured at a fixed length.

Parts (each case in its own process, so GPU memory and process groups start clean):
  rollout  the `hf` rollout engine (`HFBackend.generate`) in each decode loop (`dynamic`,
           `static`, `compiled`: `srpo_dsl.backends.decoding`) against raw `model.generate`
           (sampling, no top-k; with its dynamic cache, and with a static cache, which it compiles
           on CUDA) on the same batch of prompts x group rows, and transformers' continuous
           batching (`generate_batch` with per-token log-probs, where the installed version has
           it; else reported as failed): generated tokens/s (median of --repeats) after a first
           call, whose time (compilation included) is reported too.
  update   `srpo-dsl train` of a one-agent workflow for --steps steps at ZeRO 0 and ZeRO 3:
           median step time and its update part, update tokens/s (prompt + response tokens of
           every row), MFU = 6 x parameters x update tokens/s / the GPU's dense bf16 peak
           (attention FLOPs left out), and the peak GPU memory torch allocated in a step.
  long     the update part's ZeRO-0 run with --tokens 512 (128 rows x 512 tokens at the default batch
           and group): its peak memory, against the goal of 24 GiB on one H100.
  trl      TRL's GRPOTrainer on the same model, prompts, group, length and optimizer settings
           (bf16, `model.generate`, no vLLM): median step time and generated tokens/s, next to
           srpo-dsl's ZeRO-0 run (where TRL is installed).
  team     `srpo-dsl train` of a team shaped like `math_routed.srpo` (router, up to 3 solvers in
           one active set, verifier, in a loop of at most 2 rounds, aggregator) on the model:
           median step time, events and generated tokens per step.
  async    the same team trained synchronously and with one rollout worker on the same GPU
           (`rollout_workers = 1`, S = 1 and 2; the worker generates while the trainer updates):
           optimizer steps per second after the first step, and the mean staleness.

Shapes: Qwen3's 0.6B, 1.7B and 4B (the 4B trained through LoRA adapters, r = 16, its base frozen);
`tiny` for --cpu. `--budget-s` (default 480: the 8 minutes a lent GPU's first call allows, model
builds included) bounds the whole run: a case that would start after it is reported as skipped, so
the tables always come back. Every table prints as Markdown, ready for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

SIZES = {  # Qwen3 shapes (hidden, MLP, layers, query heads, key-value heads, head dim)
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16},
    "0.6b": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128},
    "1.7b": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128},
    "4b": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128},
}  # fmt: skip
LORA = {"4b"}  # shapes trained through LoRA adapters (`lora(r = 16)` on the policy): the base stays frozen
LONG_TOKENS = 512  # the `long` part's response length: 128 rows x 512 tokens, the memory goal's shape
VOCAB = 151936
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 FLOP/s by GPU name
PARTS = ("rollout", "update", "long", "trl", "team", "async")
ASYNC_CELLS = {"sync": {}, "async S=1": {"rollout_workers": 1, "max_staleness": 1},
               "async S=2": {"rollout_workers": 1, "max_staleness": 2}}  # fmt: skip
GENERATORS = {  # the rollout part's generators: result key -> label
    "hf_dynamic": "srpo-dsl hf engine, decode dynamic",
    "hf_static": "srpo-dsl hf engine, decode static",
    "hf_compiled": "srpo-dsl hf engine, decode compiled",
    "generate": "transformers generate (dynamic cache)",
    "generate_static": "transformers generate (static cache; compiled on CUDA)",
    "continuous_batching": "transformers generate_batch (continuous batching)",
}
ENGINE_MODES = ("dynamic", "static", "compiled")  # the hf engine's decode loops the rollout part times

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


def build_model(size: str, folder: Path, device: str) -> Path:
    """A random Qwen3-shaped model of `size` with the shipped tokenizer, saved under `folder`."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from srpo_dsl.models.specs import resolve_model_spec

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_spec("builtin:tiny"))
    config = Qwen3Config(
        vocab_size=len(tokenizer) if size == "tiny" else VOCAB,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **SIZES[size],
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16 if device == "cuda" else torch.float32)
    path = folder / f"qwen3-{size}"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def write_workflow(
    folder: Path, text: str, model: Path, args: argparse.Namespace, lora: bool = False
) -> Path:
    """The bench's workflow `text` on `model`, with the run's sizes (and LoRA adapters on the policy)."""
    folder.mkdir(parents=True, exist_ok=True)
    if lora:
        text = text.replace('hf("MODEL")', 'hf("MODEL") lora(r = 16, alpha = 32)')
    (folder / "solver.j2").write_text("{{ task.question }}=")
    for key, value in {
        "MODEL": str(model),
        "TOKENS": args.tokens,
        "GROUP": args.group,
        "BATCH": args.batch,
    }.items():
        text = text.replace(key, str(value))
    path = folder / "bench.srpo"
    path.write_text(text)
    return path


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a fresh spawned process (clean GPU memory and process group); a case that fails
    (out of memory, say) is reported as {"error": its first line} and the bench goes on."""
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        try:
            return pool.apply(fn, args)
        except Exception as exc:  # the child's exception, re-raised here
            print(f"{fn.__name__}{args[3:]}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}


def quiet() -> None:
    import logging
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    for name in ("deepspeed", "DeepSpeed", "transformers", "trl", "accelerate", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


# --- rollout ------------------------------------------------------------------------------------


def prompts_of(workflow: Path, batch: int) -> list[str]:
    from train_bench import Setup

    return [p for p, _ in Setup(workflow, 1, batch, 1).steps[0]]


def timed(fn: Callable[[], int], device: str, repeats: int) -> dict:
    """1 warm-up call (timed: compilation shows there), then the median seconds and tokens/s of
    `repeats` calls (fn returns its tokens)."""
    import torch

    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    first = time.perf_counter() - t0
    runs = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        tokens = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0, tokens))
    seconds = statistics.median(s for s, _ in runs)
    return {
        "seconds": seconds,
        "tokens": runs[0][1],
        "tokens_per_s": statistics.median(n / s for s, n in runs),
        "first_seconds": first,
    }


def left_padded(ids: list[list[int]], pad: int, device: str) -> tuple[Any, Any]:
    """`ids` left-padded to one width with `pad`, and the attention mask (1 on real tokens)."""
    import torch

    width = max(map(len, ids))
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in ids], device=device)
    starts = torch.tensor([width - len(r) for r in ids], device=device)
    return input_ids, (torch.arange(width, device=device)[None] >= starts[:, None]).long()


def rollout_case(model_path: str, workflow: str, args: dict) -> dict:
    """The hf engine in each decode loop, raw `generate` and continuous batching on the same rows."""
    quiet()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from srpo_dsl.backends import GenRequest
    from srpo_dsl.backends.chat import encode_prompts
    from srpo_dsl.backends.hf import HFBackend

    device, dtype = args["device"], torch.bfloat16 if args["device"] == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device).eval()
    prompts = prompts_of(Path(workflow), args["rollout_batch"])
    requests = [GenRequest(p, args["tokens"]) for p in prompts for _ in range(args["group"])]
    ids = encode_prompts(tokenizer, [r.prompt for r in requests], use_chat_template=False)
    result: dict[str, Any] = {"rows": len(requests), "prompt_tokens": statistics.mean(map(len, ids))}
    for mode in ENGINE_MODES:
        engine = HFBackend(model, tokenizer=tokenizer, decode=mode)
        result[f"hf_{mode}"] = attempt(partial(generated_tokens, engine, requests), device, args)
    for key, generator in baselines(model, tokenizer, ids, args).items():
        result[key] = attempt(generator, device, args)
    return result


def generated_tokens(engine: Any, requests: list) -> int:
    return sum(len(r.response_token_ids) for r in engine.generate(requests, seed=0))


def attempt(fn: Callable[[], int], device: str, args: dict) -> dict:
    """`timed(fn)`, or the first line of what it raised (an unsupported generator, say)."""
    try:
        return timed(fn, device, args["repeats"])
    except Exception as exc:  # a generator this machine or version lacks: recorded, the others go on
        return {"error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:100]}"}


def baselines(model: Any, tokenizer: Any, ids: list[list[int]], args: dict) -> dict[str, Callable[[], int]]:
    """transformers' own generators on the same rows, each returning its generated tokens."""
    import torch
    from transformers import GenerationConfig

    pad, eos, device = tokenizer.pad_token_id, tokenizer.eos_token_id, args["device"]
    input_ids, mask = left_padded(ids, pad, device)
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "pad_token_id": pad}

    def generate(**cache: Any) -> int:
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids, attention_mask=mask, max_new_tokens=args["tokens"], **sampling, **cache
            )
        new = out[:, input_ids.shape[1] :]
        stopped = (new == eos).cumsum(-1)
        return int(((stopped == 0) | ((stopped == 1) & (new == eos))).sum())

    def continuous_batching() -> int:
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        config = GenerationConfig(max_new_tokens=args["tokens"], eos_token_id=eos, **sampling)
        cb = ContinuousBatchingConfig(return_logprobs=True)  # what an engine built on it would need
        out = model.generate_batch(ids, generation_config=config, continuous_batching_config=cb)
        return sum(len(o.generated_tokens) for o in out.values())

    return {
        "generate": generate,
        "generate_static": lambda: generate(cache_implementation="static"),
        "continuous_batching": continuous_batching,
    }


# --- update (srpo-dsl train) and TRL --------------------------------------------------------------


def srpo_case(model_path: str, workflow: str, args: dict, zero: int) -> dict:
    quiet()
    from train_bench import Setup, run_srpo

    setup = Setup(Path(workflow), args["steps"], args["batch"], args["group"])
    scratch = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    run = run_srpo(
        setup, model_path, args["steps"], scratch, {"zero": zero} | args["options"], device=args["device"]
    )
    run.pop("out", None)
    return run


def trl_case(model_path: str, workflow: str, args: dict) -> dict:
    quiet()
    from train_bench import Setup, run_trl

    setup = Setup(Path(workflow), args["steps"], args["batch"], args["group"])
    scratch = Path(tempfile.mkdtemp(prefix="gpu-bench-trl-"))
    return run_trl(setup, model_path, args["steps"], scratch, threads=4, device=args["device"])


def team_case(model_path: str, workflow: str, args: dict) -> dict:
    quiet()
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import train

    out = Path(tempfile.mkdtemp(prefix="gpu-bench-team-")) / "run"
    overrides = {"steps": args["steps"], "eval_every": args["steps"] + 1, "eval_size": 1, "eval_k": 1,
                 "save_every": args["steps"] + 1} | micro_batching(args)  # fmt: skip
    history = train(plan_file(Path(workflow), out, overrides, device=args["device"]), progress=False)
    return {
        "step_times": [r["time"] for r in history],
        "events": [r["num_events"] for r in history],
        "mean_set_size": [r["mean_set_size"] for r in history],
        "tokens": [r["response_length"] * r["num_events"] * r["mean_set_size"] for r in history],
        "peak_gib": max((r.get("memory/peak_gib", 0.0) for r in history), default=0.0),
    }


def micro_batching(args: dict) -> dict:
    """The team's micro-batches (`--team-micro-batches`), then every `--option` (a token budget replaces the
    count: `max_tokens_per_micro_batch` and `micro_batches` are one choice)."""
    count = (
        {}
        if "max_tokens_per_micro_batch" in args["options"]
        else {"micro_batches": args["team_micro_batches"]}
    )
    return count | args["options"]


def async_case(model_path: str, workflow: str, args: dict) -> dict:
    """The team's `srpo-dsl train` (a subprocess: a run with a worker launches itself) in each cell of
    ASYNC_CELLS; steps per second over the steps after the first (no evaluation until the last)."""
    import subprocess

    out = {}
    for cell, options in ASYNC_CELLS.items():
        run = Path(tempfile.mkdtemp(prefix="gpu-bench-async-")) / "run"
        steps = args["steps"] + 1
        settings = {"steps": steps, "eval_every": steps, "eval_size": 1, "eval_k": 1, "save_every": steps}
        settings |= micro_batching(args) | options
        cmd = [
            sys.executable,
            "-m",
            "srpo_dsl",
            "train",
            workflow,
            "--out",
            str(run),
            "--device",
            args["device"],
        ]
        for name, value in settings.items():
            cmd += ["--option", f"{name}={value}"]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            out[cell] = {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
            continue
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        stale = [r.get("async/staleness_mean", 0.0) for r in rows[1:]]
        out[cell] = {"steps_per_s": (len(rows) - 1) / (rows[-1]["time/elapsed"] - rows[0]["time/elapsed"]),
                     "staleness": statistics.mean(stale)}  # fmt: skip
    return out


def async_report(result: dict) -> list[str]:
    lines = ["| team, one GPU | steps/s | vs sync | mean staleness |", "|---|---:|---:|---:|"]
    base = result.get("sync", {}).get("steps_per_s")
    for cell, r in result.items():
        if "error" in r:
            lines.append(f"| {cell} | failed: {r['error']} | | |")
            continue
        versus = f"{r['steps_per_s'] / base:.2f}×" if base else "—"
        lines.append(f"| {cell} | {r['steps_per_s']:.3f} | {versus} | {r['staleness']:.2f} |")
    return [*lines, ""]


# --- the report ---------------------------------------------------------------------------------


def parameters(model_path: Path) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    return sum(p.numel() for p in model.parameters())


def steady(values: list[float]) -> float:
    """The median after the first step (which pays for warm-up: allocator, kernels, DeepSpeed buckets)."""
    return statistics.median(values[1:] if len(values) > 1 else values)


def update_row(name: str, run: dict, prompt_tokens: float, params: int, peak: float | None) -> str:
    tokens = [r * prompt_tokens + t for r, t in zip(run["rows"], run["tokens"])]  # prompt + response
    per_s = steady([t / u for t, u in zip(tokens, run["update_times"])])
    mfu = f"{100 * 6 * params * per_s / peak:.1f}%" if peak else "n/a"
    gen = steady([t / (s - u) for t, s, u in zip(run["tokens"], run["step_times"], run["update_times"])])
    return (f"| {name} | {1000 * steady(run['step_times']):.0f} | {1000 * steady(run['update_times']):.0f} | "
            f"{per_s:,.0f} | {mfu} | {gen:,.0f} | {run['peak_gib']:.1f} |")  # fmt: skip


def rollout_report(r: dict) -> list[str]:
    """The rollout part's table, and each engine loop's speed against `generate` with either cache."""
    lines = [f"Rollout, {r['rows']} rows (mean prompt {r['prompt_tokens']:.0f} tokens), up to {r['tokens']} new tokens each:", "",
             "| generator | first call s | seconds | generated tokens | tokens/s |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    for key, label in GENERATORS.items():
        c = r.get(key, {"error": "not run"})
        if "error" in c:
            lines.append(f"| {label} | failed: {c['error']} | | | |")
        else:
            lines.append(f"| {label} | {c['first_seconds']:.2f} | {c['seconds']:.2f} | {c['tokens']} | "
                         f"{c['tokens_per_s']:,.0f} |")  # fmt: skip
    lines.append("")
    for mode in ENGINE_MODES:
        for base in ("generate", "generate_static"):
            if "error" not in r[f"hf_{mode}"] and "error" not in r[base]:
                ratio = r[f"hf_{mode}"]["tokens_per_s"] / r[base]["tokens_per_s"]
                lines.append(f"hf engine ({mode}) / {GENERATORS[base]}: {ratio:.2f}x")
    return [*lines, ""]


def size_report(size: str, params: int, result: dict, peak: float | None) -> list[str]:
    adapters = ", trained through LoRA adapters (r = 16)" if size in LORA else ""
    lines = [f"### {size}: {params:,} parameters{adapters}", ""]
    lines += [f"{key}: failed, {value['error']}" for key, value in result.items() if "error" in value]
    result = {k: v for k, v in result.items() if isinstance(v, dict) and "error" not in v}
    if "rollout" in result:
        lines += rollout_report(result["rollout"])
    runs = {k: v for k, v in result.items() if k.startswith("zero") or k in ("long", "trl")}
    if runs:
        prompt = result.get("rollout", {}).get("prompt_tokens", 0.0)
        lines += ["| run | step ms | update ms | update tokens/s | MFU | rollout tokens/s | peak GiB |",
                  "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for key, run in runs.items():
            if key == "trl":
                lines.append(f"| TRL GRPOTrainer | {1000 * steady(run['step_times']):.0f} | | | | "
                             f"{steady([t / s for t, s in zip(run['tokens'], run['step_times'])]):,.0f} (whole step) | |")  # fmt: skip
            else:
                name = f"ZeRO-0, {LONG_TOKENS} tokens" if key == "long" else key.replace("zero", "ZeRO-")
                lines.append(update_row(f"srpo-dsl {name}", run, prompt, params, peak))
        lines.append("")
    if "team" in result:
        t = result["team"]
        lines += [f"Team (math_routed shape): step {1000 * steady(t['step_times']):.0f} ms, "
                  f"{statistics.mean(t['events']):.0f} events/step, mean K {statistics.mean(t['mean_set_size']):.2f}, "
                  f"{statistics.mean(t['tokens']):,.0f} generated tokens/step, peak {t['peak_gib']:.1f} GiB", ""]  # fmt: skip
    if "async" in result:
        lines += async_report(result["async"])
    return lines


def machine(device: str) -> tuple[str, float | None]:
    import torch
    import transformers
    from train_bench import cpu_name

    line = (f"{cpu_name()}, python {platform.python_version()}, torch {torch.__version__}, "
            f"transformers {transformers.__version__}")  # fmt: skip
    if device != "cuda":
        return f"machine: {line}; device cpu (fp32)", None
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    return f"machine: {name} (CUDA {torch.version.cuda}), {line}; bf16", peak


class Clock:
    """The run's time budget (`--budget-s`): a case starts only while time is left."""

    def __init__(self, budget_s: float):
        self.end = time.monotonic() + budget_s

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`in_child(fn, *args)`, or a skipped case's record once the budget is spent."""
        if time.monotonic() >= self.end:
            return {"error": "skipped: the --budget-s time budget was spent"}
        return in_child(fn, *args)


def run_size(size: str, folder: Path, args: argparse.Namespace, parts: list[str], clock: Clock) -> dict:
    cfg = {"device": args.device, "batch": args.batch, "group": args.group, "tokens": args.tokens,
           "steps": args.steps, "repeats": args.repeats, "rollout_batch": args.rollout_batch,
           "team_micro_batches": args.team_micro_batches, "options": args.options}  # fmt: skip
    model = clock.run(build_model, size, folder, args.device)
    if isinstance(model, dict):
        return {"params": 0, "build": model}
    lora = size in LORA
    solver = write_workflow(folder / f"solver-{size}", SOLVER, model, args, lora)
    result: dict[str, Any] = {"params": parameters(model)}
    if "rollout" in parts:
        result["rollout"] = clock.run(rollout_case, str(model), str(solver), cfg) | {"tokens": args.tokens}
    for zero in args.zero if "update" in parts else []:
        result[f"zero{zero}"] = clock.run(srpo_case, str(model), str(solver), cfg, zero)
    if "long" in parts:
        long = write_workflow(
            folder / f"long-{size}", SOLVER, model, args_with(args, tokens=LONG_TOKENS), lora
        )
        result["long"] = clock.run(srpo_case, str(model), str(long), cfg | {"tokens": LONG_TOKENS}, 0)
    if "trl" in parts and has_trl() and not lora:
        result["trl"] = clock.run(trl_case, str(model), str(solver), cfg)
    for part, case in (("team", team_case), ("async", async_case)):
        if part in parts:
            team = write_workflow(folder / f"{part}-{size}", TEAM, model, args, lora)
            result[part] = clock.run(case, str(model), str(team), cfg)
    return result


def args_with(args: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**(vars(args) | changes))


def has_trl() -> bool:
    import importlib.util

    return importlib.util.find_spec("trl") is not None


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="the tiny config on CPU (fp32), small batch: for CI")
    ap.add_argument("--sizes", default=None, help="comma-separated, of " + ", ".join(SIZES))
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated, of " + ", ".join(PARTS))
    ap.add_argument("--batch", type=int, default=None, help="prompts per training step (default 16; --cpu 4)")
    ap.add_argument(
        "--rollout-batch", type=int, default=None, help="prompts of the rollout part (default 64; --cpu 4)"
    )
    ap.add_argument("--group", type=int, default=None, help="samples per prompt (default 8; --cpu 2)")
    ap.add_argument("--tokens", type=int, default=None, help="new tokens per response (default 128; --cpu 8)")
    ap.add_argument("--steps", type=int, default=None, help="training steps per run (default 4; --cpu 2)")
    ap.add_argument(
        "--team-micro-batches", type=int, default=None, help="the team's update (default 8; --cpu 1)"
    )
    ap.add_argument("--repeats", type=int, default=2, help="timed rollout calls (median)")
    ap.add_argument("--zero", default="0,3", help="ZeRO stages of the update part")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--budget-s", type=float, default=480.0, help="cases start only within this many seconds")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        help="a `train with` option of every trained part, NAME=VALUE, repeatable "
        "(e.g. pack_rows=true, max_tokens_per_micro_batch=16384, gradient_checkpointing=true)",
    )
    args = ap.parse_args()
    small = {
        "sizes": "tiny",
        "batch": 4,
        "rollout_batch": 4,
        "group": 2,
        "tokens": 8,
        "steps": 2,
        "team_micro_batches": 1,
    }
    large = {
        "sizes": "0.6b,1.7b,4b",
        "batch": 16,
        "rollout_batch": 64,
        "group": 8,
        "tokens": 128,
        "steps": 4,
        "team_micro_batches": 8,
    }
    for key, value in (small if args.cpu else large).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.device = "cpu" if args.cpu else "cuda"
    args.zero = [int(z) for z in args.zero.split(",")]
    args.options = dict(o.split("=", 1) for o in args.option)
    return args


def main() -> None:
    args = parse_args()
    parts = args.parts.split(",")
    if unknown := set(parts) - set(PARTS) or set(args.sizes.split(",")) - set(SIZES):
        raise SystemExit(f"unknown part or size: {', '.join(sorted(unknown))}")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --cpu")
    line, peak = machine(args.device)
    results, clock = {}, Clock(args.budget_s)
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as scratch:
        for size in args.sizes.split(","):
            results[size] = run_size(size, Path(scratch), args, parts, clock)
            print(f"done {size}", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print(line)
    print(f"{args.batch} prompts x {args.group} samples, {args.tokens} new tokens, {args.steps} training steps per run "
          f"(medians after the first step)\n")  # fmt: skip
    for size, result in results.items():
        print("\n".join(size_report(size, result.pop("params"), result, peak)))


if __name__ == "__main__":
    main()
