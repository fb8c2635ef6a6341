"""The GPU path, measured: rollouts, updates, the memory case, TRL side by side, a team's step, async.

    python bench/gpu_bench.py --json runs/gpu.jsonl     # CUDA, bf16, Qwen3-0.6B shape: fits 8 minutes
    python bench/gpu_bench.py --sizes 1.7b --parts update,long --zero 0,3
    python bench/gpu_bench.py --parts rollout --generators all --repeats 3
    python bench/gpu_bench.py --cpu                    # a tiny config on CPU, fp32 (what the tests run)
    python bench/gpu_bench.py --option pack_rows=true --option max_tokens_per_micro_batch=16384

Nothing is downloaded: each model is a random initialisation of a real architecture built from its
config (Qwen3-0.6B, 1.7B and 4B shapes, their 151,936-token vocabulary, tied embeddings; 4B trained
through LoRA adapters, r = 16, its base frozen; `tiny` for --cpu), saved with the shipped tokenizer
(`builtin:tiny`). A random model rarely emits end-of-sequence, so nearly every response runs to `--tokens`
(each generator counts the tokens it kept, up to and including an end-of-sequence).

The parts run in this order, the order of their importance (issue 46's goals first):
  rollout  the `hf` engine (`HFBackend.generate`) in its decode loops against raw `model.generate` on the
           same rows (sampling, no top-k), one generator after another (`--generators`, default the
           first four): decode `compiled` (the CUDA default), `generate` with a static cache (compiled on
           CUDA: the goal's baseline), `generate` with its dynamic cache, decode `static`, then (`all`)
           decode `dynamic` and transformers' continuous batching (`generate_batch` with per-token
           log-probs). Each: the first call's seconds (compilation included) apart from the median
           seconds and tokens/s of --repeats timed calls; for the engine, its decode statistics where
           it reports them (`HFBackend.decode_stats()`: compiled shapes, compile seconds, cache bytes).
  update   `srpo-dsl train` of a one-agent workflow for --steps steps at each --zero stage: step time and
           its update part, update tokens/s (prompt + response tokens), MFU = 6 x parameters x update
           tokens/s / the GPU's dense bf16 peak (attention left out), rollout tokens/s, peak memory.
  long     the memory case: the update at ZeRO 0 with 512-token responses (128 rows x 512 tokens at the
           default batch and group), against the goal of 24 GiB.
  trl      TRL's GRPOTrainer on the same model, prompts, group, length and optimizer settings (where trl
           is installed), beside the update part's ZeRO-0 row.
  team     `srpo-dsl train` of a team shaped like `math_routed.srpo` (router, up to 3 solvers in one
           active set, verifier, at most 2 rounds, aggregator): step time, events, tokens, peak memory.
  async    that team trained synchronously and with one rollout worker on the same device (S = 1, 2):
           optimizer steps per second after the first step, and the mean staleness.
The trained parts decode with `--decode` (default `static`: `compiled` would compile each new shape on
its first call, 46 s at 0.6B on an H200, twice in a short run: the step-0 evaluation's and the batch's).

Every case runs in its own process (its own session: GPU memory and process groups start clean, and
the whole of it can be stopped). As each case ends, its record is appended to the `--json` file (JSON
Lines, started afresh; one object a line: "kind" run, case or step, "part", "size", "case", "status"
done / failed / skipped / stopped, "note", "figures", and the machine fields: device, host, python,
torch, transformers, deepspeed, trl, commit, date) and its Markdown table row is printed (flushed).
A trained case records each step as it ends (kind "step"). `--budget-s` (default 480 s, the whole run,
model builds included) skips a case whose expected time (an H200's, `gpubench/budget.py`; on CPU only
the time left counts) exceeds what is left, and stops one still running when it ends; SIGTERM and
SIGINT stop the run the same way. A case stopped or failed mid-way keeps the figures of the steps it
finished. So the tables always come back, whole or cut, ready for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from gpubench.budget import Clock  # noqa: E402 (after the path it is found on)
from gpubench.parts import PARTS, Bench, build  # noqa: E402
from gpubench.records import Recorder, context  # noqa: E402
from gpubench.report import GENERATORS  # noqa: E402
from gpubench.shapes import SIZES  # noqa: E402

DEFAULT_GENERATORS = ("hf_compiled", "generate_static", "generate", "hf_static")
SMALL = {
    "sizes": "tiny",
    "batch": 4,
    "rollout_batch": 4,
    "group": 2,
    "tokens": 8,
    "steps": 2,
    "team_micro_batches": 1,
}  # fmt: skip  (--cpu)
LARGE = {
    "sizes": "0.6b",
    "batch": 16,
    "rollout_batch": 64,
    "group": 8,
    "tokens": 128,
    "steps": 4,
    "team_micro_batches": 8,
}  # fmt: skip  (CUDA: sized to fit 8 minutes, docs/benchmarks.md)


def names(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """A comma-separated list of `allowed` names, in `allowed`'s order; a one-line error for others."""
    given = [v.strip() for v in value.split(",") if v.strip()]
    if unknown := sorted(set(given) - set(allowed)):
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (choose from {', '.join(allowed)})")
    return [name for name in allowed if name in given]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="the tiny config on CPU (fp32), small batches")
    ap.add_argument(
        "--sizes", default=None, help="comma-separated, of " + ", ".join(SIZES) + " (default 0.6b)"
    )
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated, of " + ", ".join(PARTS))
    ap.add_argument("--generators", default=",".join(DEFAULT_GENERATORS),
                    help="the rollout part's, comma-separated, or all: " + ", ".join(GENERATORS))  # fmt: skip
    ap.add_argument("--batch", type=int, help="prompts per training step (default 16; --cpu 4)")
    ap.add_argument("--rollout-batch", type=int, help="prompts of the rollout part (default 64; --cpu 4)")
    ap.add_argument("--group", type=int, help="samples per prompt (default 8; --cpu 2)")
    ap.add_argument("--tokens", type=int, help="new tokens per response (default 128; --cpu 8)")
    ap.add_argument("--steps", type=int, help="training steps per trained case (default 4; --cpu 2)")
    ap.add_argument("--team-micro-batches", type=int, help="the team's update (default 8; --cpu 1)")
    ap.add_argument("--repeats", type=int, default=1, help="timed rollout calls after the first (median)")
    ap.add_argument("--zero", default="0", help="ZeRO stages of the update part, comma-separated")
    ap.add_argument("--decode", default="static", choices=("auto", "dynamic", "static", "compiled"),
                    help="the hf engine's decode loop in the trained parts")  # fmt: skip
    ap.add_argument("--json", help="the JSON Lines file of the run's records (started afresh)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="the whole run's time, in seconds")
    ap.add_argument("--option", action="append", default=[],
                    help="a `train with` option of every trained part, NAME=VALUE, repeatable "
                    "(e.g. pack_rows=true, max_tokens_per_micro_batch=16384, gradient_checkpointing=true)")  # fmt: skip
    args = ap.parse_args()
    for key, value in (SMALL if args.cpu else LARGE).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.device = "cpu" if args.cpu else "cuda"
    args.sizes = names(args.sizes, tuple(SIZES), "size")
    args.parts = names(args.parts, tuple(PARTS), "part")
    args.generators = names(",".join(GENERATORS) if args.generators == "all" else args.generators,
                            tuple(GENERATORS), "generator")  # fmt: skip
    args.zero = [int(z) for z in names(args.zero, ("0", "1", "2", "3"), "ZeRO stage")]
    if bad := [o for o in args.option if "=" not in o]:
        raise SystemExit(f"--option {bad[0]}: expected NAME=VALUE")
    args.options = dict(o.split("=", 1) for o in args.option)
    return args


def machine_line(fields: dict) -> str:
    versions = ", ".join(
        f"{k} {fields[k]}" for k in ("python", "torch", "transformers", "deepspeed") if fields[k]
    )
    precision = "fp32" if fields["device"] == "cpu" else "bf16"
    return f"machine: {fields['device']} (host {fields['host']}), {versions}; commit {fields['commit']}; {precision}"


def main() -> None:
    args = parse_args()
    clock = Clock(args.budget_s, args.device)
    clock.watch_signals()
    fields = context(args.device)
    if fields["device"] is None:
        raise SystemExit("no CUDA device (nvidia-smi lists none): run with --cpu")
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as scratch:
        path = Path(args.json) if args.json else Path(scratch) / "records.jsonl"
        path.write_text("")
        rec = Recorder(path, fields)
        rec.write({"kind": "run", "args": {k: v for k, v in vars(args).items() if k != "option"}})
        print(f"{machine_line(fields)}; budget {args.budget_s:.0f} s\n", flush=True)
        bench = Bench(args, rec, clock, Path(scratch))
        for size in args.sizes:
            model = build(bench, size)
            for part in args.parts:
                PARTS[part](bench, model)
    if clock.exit_code():
        raise SystemExit(clock.exit_code())


if __name__ == "__main__":
    main()
