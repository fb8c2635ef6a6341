"""The `hf` engine's three decode loops side by side, in one run: first call, steady tokens/s, and the
torch ops the host launches per decoded token outside a compiled region (torch's profiler).

    python bench/decode_bench.py              # a random Qwen3-shaped model, 16 rows x 64 tokens, CPU
    python bench/decode_bench.py --smoke      # tiny shapes, one timed call, `dynamic` and `static` (CI)
    python bench/decode_bench.py --device cuda --hidden 1024 --layers 28 --vocab 151936 --rows 512

The host-op count is the device-independent part: every op launched per token is a kernel launch on
a GPU, which is what bounds a decode step at small batch. `compiled` runs the whole step as one graph
(`srpo_dsl/backends/decode_step.py`), so past its check every 8 tokens it launches nothing per token.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from srpo_dsl.backends import GenRequest
from srpo_dsl.backends.hf import HFBackend

MODES = ("dynamic", "static", "compiled")


def build(args: argparse.Namespace) -> tuple[torch.nn.Module, object]:
    """A random-weight Qwen3-shaped model and the embedded model's tokenizer (ids past its vocabulary are
    never decoded to text by the bench)."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from srpo_dsl.models.specs import resolve_model_spec

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_spec("builtin:tiny"))
    heads = max(1, args.hidden // 64)
    config = Qwen3Config(
        vocab_size=max(args.vocab, len(tokenizer)),
        hidden_size=args.hidden,
        intermediate_size=3 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=64,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    return Qwen3ForCausalLM(config).to(args.device, dtype).eval(), tokenizer


def requests(rows: int, tokens: int) -> list[GenRequest]:
    """Rows that run to their limit (a random model rarely ends), each with its own seed."""
    return [GenRequest(f"question {i}: 17 + {i} =", tokens, 1.0, seed=i) for i in range(rows)]


def host_ops(engine: HFBackend, reqs: list[GenRequest]) -> int:
    """Top-level torch ops the host launches during one `generate`, outside any compiled region."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.generate(reqs)

    def compiled(event) -> bool:
        parent = event.cpu_parent
        while parent is not None:
            if parent.name.startswith(("Torch-Compiled Region", "CompiledFunction")):
                return True
            parent = parent.cpu_parent
        return False

    top = lambda e: e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")  # noqa: E731
    return sum(e.name.startswith("aten::") and top(e) and not compiled(e) for e in prof.events())


def timed(engine: HFBackend, reqs: list[GenRequest], device: str) -> float:
    begun = time.perf_counter()
    engine.generate(reqs)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - begun


def measure(mode: str, model, tokenizer, args: argparse.Namespace) -> dict:
    """One loop's first call, steady tokens/s (median of `repeats` calls) and host ops per token (the
    difference between a decode of `tokens` and one of half as many, per extra token)."""
    engine = HFBackend(model, tokenizer=tokenizer, decode=mode)
    reqs = requests(args.rows, args.tokens)
    first = timed(engine, reqs, args.device)
    steady = statistics.median(timed(engine, reqs, args.device) for _ in range(args.repeats))
    half = requests(args.rows, args.tokens // 2)
    engine.generate(half)  # its shape is warm too (it shares the length bucket or compiles here)
    per_token = (host_ops(engine, reqs) - host_ops(engine, half)) / (args.tokens - args.tokens // 2)
    return {
        "mode": mode,
        "first_s": round(first, 2),
        "tokens_per_s": round(args.rows * args.tokens / steady, 1),
        "host_ops_per_token": round(per_token, 2),
        **{k: v for k, v in engine.decode_stats().items() if k in ("decode_shapes", "compile_s")},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    parser.add_argument("--json", help="append one JSON line per loop to this file")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, one timed call, no compile (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.hidden, args.layers, args.vocab, args.rows, args.tokens, args.repeats = 64, 1, 512, 4, 16, 1
        args.modes = (
            "dynamic,static"  # `compiled` compiles for ~20 s on CPU: tests/backends/test_decode_shapes.py
        )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    model, tokenizer = build(args)
    cpu = platform.processor() or platform.machine()
    print(f"decode loops, {args.device} ({cpu}, load {os.getloadavg()[0]:.1f}), torch {torch.__version__}")
    print(f"model: hidden {args.hidden}, {args.layers} layers, vocab {model.config.vocab_size}; ", end="")
    print(f"{args.rows} rows x {args.tokens} tokens, median of {args.repeats}\n")
    print("| loop | first call, s | tokens/s | host ops per token | compiled shapes | compile s |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in args.modes.split(","):
        row = measure(mode, model, tokenizer, args)
        shapes, seconds = row.get("decode_shapes", 0), row.get("compile_s", 0.0)
        print(
            f"| {mode} | {row['first_s']} | {row['tokens_per_s']:,} | {row['host_ops_per_token']} "
            f"| {shapes} | {seconds:.1f} |",
            flush=True,
        )
        if args.json:
            with open(args.json, "a") as out:
                out.write(json.dumps({"device": args.device, **row}) + "\n")


if __name__ == "__main__":
    main()
