"""The update's padding, and its time, with rows padded (today's default) and packed (`pack_rows`), side by
side in one run on one step's real rows.

    python bench/packing_bench.py              # the quickstart on builtin:tiny, 5 timed updates per side
    python bench/packing_bench.py --repeats 9
    python bench/packing_bench.py --smoke      # a check that it runs: a step of 2 prompts x 2, one update each

The rows are one training step of `workflows/quickstart.srpo` (its own batch and group: 32 prompts x 8
rollouts) rolled out by the embedded model, as `srpo-dsl train` builds them. Two teams:
- `quickstart`: those rows as they are;
- `one long member`: the same rows with the aggregator's responses made --long tokens long (its tokens
  repeated), a team where one member writes far more than the others.

For each, with one micro-batch and with a token budget (--budget, whole events): the tokens the
update's forward passes process (padding included) and the fraction of them that is padding, for the
default scoring (each distinct prompt once, left-padded; every response on its KV cache, right-padded)
and for packed rows (rows one after another in sequences as long as the longest row; a prompt shared
by G rollouts runs G times); then the median time of --repeats updates (forward, backward, optimizer
step) after one warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def forward_tokens(rows, plan: list[list[int]], packed: bool) -> tuple[int, int]:
    """(tokens the forward passes process, of which padding) over the micro-batches of `plan`. Padded:
    each distinct prompt once, to the longest prompt, and each response to the longest response. Packed:
    sequences as long as the longest row, padded at their tail only."""
    from srpo_dsl.backends.logprobs import pack_into

    processed = useful = 0
    for micro in filter(None, plan):
        prompts = [tuple(rows.prompt_token_ids[i]) for i in micro]
        responses = [rows.response_token_ids[i] for i in micro]
        if packed:
            lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
            processed += len(pack_into(lengths, max(lengths))) * max(lengths)
            useful += sum(lengths)
            continue
        distinct = set(prompts)
        processed += len(distinct) * max(map(len, distinct)) + len(micro) * max(map(len, responses))
        useful += sum(map(len, distinct)) + sum(map(len, responses))
    return processed, processed - useful


def lengthened(rows, role: str, tokens: int):
    """The rows with `role`'s responses repeated to `tokens` tokens (their behaviour log-probs too)."""
    import dataclasses

    def grow(values: list, who: str) -> list:
        return (list(values) * (tokens // max(len(values), 1) + 1))[:tokens] if who == role else list(values)

    responses = [grow(r, who) for r, who in zip(rows.response_token_ids, rows.roles)]
    behaviour = [grow(b, who) for b, who in zip(rows.behaviour_logprobs, rows.roles)]
    return dataclasses.replace(rows, response_token_ids=responses, behaviour_logprobs=behaviour)


def timed(run, rows, opts, repeats: int) -> float:
    """Median seconds of `repeats` updates (one warm-up first)."""
    from srpo_dsl.rl.loop.update import update

    def once() -> float:
        start = time.perf_counter()
        update(run.policies, rows, opts, run.dist, run.temperatures, objective=run.objective)
        return time.perf_counter() - start

    once()
    return statistics.median(once() for _ in range(repeats))


def measure(run, rows, name: str, budget: int, repeats: int) -> list[str]:
    """One table row per (micro-batching, scoring) of `rows`."""
    from srpo_dsl.rl.loop.update import atomic_ids, micro_plan

    tokens = [len(a) + len(b) for a, b in zip(rows.prompt_token_ids, rows.response_token_ids)]
    atoms = {packed: atomic_ids(rows, run.objective, packed) for packed in (False, True)}
    out = []
    for batching in ({}, {"max_tokens_per_micro_batch": budget}):
        for packed in (False, True):
            opts = run.opts.model_copy(update={"pack_rows": packed, "epochs": 1, **batching})
            plan = micro_plan(atoms[packed], tokens, opts)
            processed, padding = forward_tokens(rows, plan, packed)
            seconds = timed(run, rows, opts, repeats)
            how = f"budget {budget}" if batching else "one micro-batch"
            out.append(
                f"| {name} | {how} ({len(plan)}) | {'packed' if packed else 'padded'} | {processed:,} | "
                f"{100 * padding / processed:.1f}% | {seconds:.3f} |"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--long", type=int, default=200, help="the long member's response tokens")
    parser.add_argument("--budget", type=int, default=4096, help="tokens per micro-batch")
    parser.add_argument(
        "--smoke", action="store_true", help="a check that it runs: 2 prompts x 2, one update"
    )
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.long, args.budget = 1, 20, 64
    step = {"batch": 2, "group": 2} if args.smoke else {}  # the quickstart's own: 32 x 8
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.prepare import prepare_run
    from srpo_dsl.rl.loop.trainer import rollout, training_rows

    with tempfile.TemporaryDirectory() as tmp:
        run = prepare_run(
            plan_file(ROOT / "workflows/quickstart.srpo", Path(tmp) / "run", step, device="cpu")
        )
        rows = training_rows(run, rollout(run, 1)[0])
        table = measure(run, rows, "quickstart", args.budget, args.repeats)
        long = lengthened(rows, "aggregator", args.long)
        table += measure(run, long, "one long member", args.budget, args.repeats)
    print(f"load average {os.getloadavg()[0]:.2f}; {len(rows)} rows, {rows.num_events} events")
    print("| team | micro-batches | rows | forward tokens | padding | update (s) |")
    print("|---|---|---|---:|---:|---:|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
