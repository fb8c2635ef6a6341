"""Peak memory of one forward + backward of the update's scoring: the whole logits against the chunked head.

    python bench/logits_memory_bench.py              # the 0.6B vocabulary and width, 2 layers, bf16, 32 x 256
    python bench/logits_memory_bench.py --smoke      # a small shape in seconds (what the tests run)
    python bench/logits_memory_bench.py --layers 28 --scoring uncached --json out.jsonl   # the whole 0.6B

The model is a random initialisation of the Qwen3-0.6B config (`gpubench.shapes.SIZES`, its 151,936-token
vocabulary, tied embeddings) with `--layers` of its 28 layers, 2 by default: the logits' share depends
on rows, tokens and vocabulary only, and on a shared 2-core CPU all 28 take about 7 minutes a side.
The rows are `--rows` prompts + responses of `--tokens` ids in all (`--prompt` of them the prompt,
every 4 rows sharing one, as a group of rollouts does), random ids. One
call of `response_logprobs` under grad with the update's scoring (`--scoring`: `cached`, the update's
default; `uncached` with the layers checkpointed, as `gradient_checkpointing` runs; `packed`), then the
backward of a weighted mean of the log-probs, as the update's surrogate.

Each side runs in a child process of its own, one after the other: `whole` (`chunked_head.full_logits`,
the path before the chunked head) and `chunked`. A child builds the model, resets its resident-set
high-water mark (`/proc/self/clear_refs`, Linux), scores, and reports the mark (`VmHWM`): its peak
RSS over the forward and backward, the model, its gradients and the scoring's own memory included,
and the peak less the RSS before it (what the scoring added). A child runs with glibc's
`MALLOC_MMAP_THRESHOLD_` at 1 MiB: every larger block is mapped on its own and unmapped when freed,
so RSS follows the live tensors (with glibc's default, freed chunks of logits stay in its heap and the
chunked side reads up to twice its live memory).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from gpubench.shapes import SIZES, VOCAB  # noqa: E402
from train_bench import cpu_name  # noqa: E402

from srpo_dsl.backends.logprobs import SCORINGS, PickedLogprobs  # noqa: E402

SIDES = ("whole", "chunked")
GROUP = 4  # rows per prompt
SMOKE = ["--layers", "1", "--hidden", "64", "--vocab", "32768", "--rows", "8", "--tokens", "128", "--prompt",
         "16", "--dtype", "float32", "--scoring", "cached", "--chunk-bytes", str(2**24)]  # fmt: skip


def build(args: argparse.Namespace):
    """The random Qwen3 model of `args`, built in its dtype (no float32 copy on the way)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape = dict(SIZES["0.6b"], num_hidden_layers=args.layers)
    if args.hidden:
        shape |= {
            "hidden_size": args.hidden,
            "intermediate_size": 3 * args.hidden,
            "head_dim": args.hidden // 4,
        }
    config = Qwen3Config(vocab_size=args.vocab, tie_word_embeddings=True, **shape)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, args.dtype))
    try:
        return Qwen3ForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)


def rows(args: argparse.Namespace) -> tuple[list[list[int]], list[list[int]]]:
    """`--rows` random prompts (one per `GROUP` rows) and responses, `--tokens` ids a row."""
    import torch

    generator = torch.Generator().manual_seed(1)
    ids = lambda n: torch.randint(3, args.vocab, (n,), generator=generator).tolist()  # noqa: E731
    prompts = [ids(args.prompt) for _ in range(0, args.rows, GROUP)]
    return [prompts[i // GROUP] for i in range(args.rows)], [
        ids(args.tokens - args.prompt) for _ in range(args.rows)
    ]


def rss_mib(field: str) -> float:
    """`VmRSS` or `VmHWM` of this process, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"/proc/self/status has no {field}: this bench reads Linux's process memory")


def side(args: argparse.Namespace) -> dict:
    """One forward + backward of the scoring, `args.side`'s way, after a warm-up call on one group of
    short rows (libraries and thread pools loaded, gradients freed again); its peak memory and time."""

    from srpo_dsl.rl.engines.policies import checkpoint_layers

    PickedLogprobs.CHUNK_BYTES = args.chunk_bytes
    model = build(args)
    if args.scoring == "uncached":
        checkpoint_layers(model)
    prompts, responses = rows(args)
    step(model, prompts[:GROUP], [r[:2] for r in responses[:GROUP]], args)
    model.zero_grad(set_to_none=True)
    before = rss_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again from here
    start = time.perf_counter()
    step(model, prompts, responses, args)
    seconds = time.perf_counter() - start
    peak = rss_mib("VmHWM")
    return {
        "side": args.side,
        "peak_mib": peak,
        "before_mib": before,
        "added_mib": peak - before,
        "seconds": seconds,
    }


def step(model, prompts: list[list[int]], responses: list[list[int]], args: argparse.Namespace) -> None:
    """`response_logprobs` under grad, then the backward of a weighted mean of the log-probs."""
    from contextlib import nullcontext

    import torch

    from srpo_dsl.backends.chunked_head import full_logits
    from srpo_dsl.backends.logprobs import response_logprobs

    with full_logits() if args.side == "whole" else nullcontext():
        logprobs, _ = response_logprobs(
            model, prompts, responses, 0, 1.0, torch.device("cpu"), scoring=args.scoring
        )
    weights = torch.randn(logprobs.shape, generator=torch.Generator().manual_seed(2))
    (weights * logprobs).sum().div(weights.numel()).backward()


def run_side(name: str, argv: list[str]) -> dict:
    """`side` in a fresh child process; its JSON line."""
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": str(2**20)}  # glibc maps each block >= 1 MiB apart
    done = subprocess.run(
        [sys.executable, __file__, *argv, "--side", name],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"the {name} side failed: {(done.stderr.strip().splitlines() or ['no message'])[-1]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(args: argparse.Namespace, results: list[dict]) -> str:
    """The results as a Markdown table, the shape above it."""
    logits = args.rows * (args.tokens - args.prompt) * args.vocab * 4 / 2**20
    head = (
        f"{args.rows} rows x {args.tokens} tokens ({args.prompt} prompt), vocabulary {args.vocab}, "
        f"{args.layers} layers, {args.dtype}, scoring `{args.scoring}`, "
        f"chunk budget {args.chunk_bytes / 2**20:g} MiB; float32 logits of the responses: {logits:,.0f} MiB; "
        f"{cpu_name()}, load {os.getloadavg()[0]:.1f}"
    )
    lines = [head, "", "| logits | peak RSS, MiB | before, MiB | added by the scoring, MiB | seconds |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in results:
        mib = " | ".join(f"{r[key]:,.0f}" for key in ("peak_mib", "before_mib", "added_mib"))
        lines.append(f"| {r['side']} | {mib} | {r['seconds']:.1f} |")
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="a small shape: " + " ".join(SMOKE))
    ap.add_argument("--layers", type=int, default=2, help="of the 0.6B's 28")
    ap.add_argument("--hidden", type=int, default=0, help="another hidden size (0: the 0.6B's)")
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=256, help="prompt + response ids a row")
    ap.add_argument("--prompt", type=int, default=32, help="prompt ids a row")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--scoring", choices=SCORINGS, default="cached")
    ap.add_argument(
        "--chunk-bytes", type=int, default=PickedLogprobs.CHUNK_BYTES, help="float32 logits per chunk"
    )
    ap.add_argument("--json", type=Path, help="append each side's result here (JSON Lines)")
    ap.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a child's
    args = ap.parse_args(argv)
    if args.smoke:
        args = ap.parse_args([*SMOKE, *(argv if argv is not None else sys.argv[1:])])
    if not 0 < args.prompt < args.tokens or args.rows < 1 or args.layers < 1:
        ap.error("need rows >= 1, layers >= 1 and 0 < prompt < tokens")
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.side:
        print(json.dumps(side(args)))
        return []
    results = []
    for name in SIDES:
        results.append(run_side(name, argv))
        if args.json:
            shape = {k: v for k, v in vars(args).items() if k not in ("json", "side")}
            with args.json.open("a") as out:
                out.write(json.dumps(results[-1] | {"shape": shape}) + "\n")
        print(
            f"{name}: peak {results[-1]['peak_mib']:,.0f} MiB in {results[-1]['seconds']:.1f} s", flush=True
        )
    print(table(args, results))
    return results


if __name__ == "__main__":
    main()
