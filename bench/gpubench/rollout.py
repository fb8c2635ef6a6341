"""The rollout part, in its own process: the hf engine in each decode loop, raw `generate` and continuous
batching on the same rows, one generator after another in GENERATORS' order, each recorded (and its row
printed) as it ends; a generator that cannot finish before the budget's end is skipped."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from gpubench import budget
from gpubench.records import Recorder, case_record
from gpubench.report import DECODE_STATS, GENERATORS, row

ENGINE_MODES = {"hf_compiled": "compiled", "hf_static": "static", "hf_dynamic": "dynamic"}  # key -> decode


def has_decode_stats() -> bool:
    """Whether the hf engine reports its decode loop's compiles and caches (`HFBackend.decode_stats`)."""
    from srpo_dsl.backends.hf import HFBackend

    return callable(getattr(HFBackend, "decode_stats", None))


def run(spec: dict[str, Any], rec: Recorder) -> None:
    import torch
    from train_bench import Setup
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from srpo_dsl.backends import GenRequest
    from srpo_dsl.backends.chat import encode_prompts

    device = spec["device"]
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=dtype).to(device).eval()
    prompts = [p for p, _ in Setup(Path(spec["workflow"]), 1, spec["rollout_batch"], 1).steps[0]]
    requests = [GenRequest(p, spec["tokens"]) for p in prompts for _ in range(spec["group"])]
    chat = bool(tokenizer.chat_template)  # as the engine (and the trainer) encode them
    ids = encode_prompts(tokenizer, [r.prompt for r in requests], use_chat_template=chat)
    warm_up(model, ids, device)
    clock = budget.Clock(spec["deadline"] - time.time(), device)
    stats = has_decode_stats()
    for key in spec["generators"]:
        estimate = budget.rollout_s(key, spec["size"], len(requests), spec["tokens"], spec["repeats"])
        if (why := clock.gate(estimate)) is not None:
            record = case_record("rollout", spec["size"], key, "skipped", note=why)
        else:
            fn, engine = generator(key, model, tokenizer, requests, ids, spec, chat)
            record = attempt(key, fn, engine, spec)
            if record["status"] == "done":
                record["figures"] |= {"rows": len(requests), "prompt_tokens": statistics.mean(map(len, ids))}
        rec.case(record, row("rollout", GENERATORS[key], record, stats))


def warm_up(model: Any, ids: list[list[int]], device: str) -> None:
    """One forward pass before any timing, so that no generator's first call pays for the device's start
    (CUDA's context, cuBLAS's handles)."""
    import torch

    with torch.no_grad():
        model(torch.tensor([ids[0]], device=device))
    if device == "cuda":
        torch.cuda.synchronize()


def generator(key: str, model: Any, tokenizer: Any, requests: list, ids: list[list[int]], spec: dict,
              chat: bool) -> tuple[Callable[[], int], Any]:  # fmt: skip
    """The generator `key` on these rows (a function returning the tokens it generated), and the engine
    behind it (None for transformers' own)."""
    from srpo_dsl.backends.hf import HFBackend

    if key in ENGINE_MODES:
        engine = HFBackend(model, tokenizer=tokenizer, decode=ENGINE_MODES[key], use_chat_template=chat)
        return partial(generated_tokens, engine, requests), engine
    return baselines(model, tokenizer, ids, spec)[key], None


def generated_tokens(engine: Any, requests: list) -> int:
    return sum(len(r.response_token_ids) for r in engine.generate(requests, seed=0))


def attempt(key: str, fn: Callable[[], int], engine: Any, spec: dict) -> dict[str, Any]:
    """`timed(fn)`'s record with the engine's decode statistics where it has them, or a failed record
    with the first line of what it raised (a generator this machine or version lacks, say)."""
    try:
        figures = timed(fn, spec["device"], spec["repeats"])
    except Exception as exc:  # recorded; the other generators go on
        note = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:100]}"
        return case_record("rollout", spec["size"], key, "failed", note=note)
    stats = getattr(engine, "decode_stats", None)
    if callable(stats):
        figures |= {k: v for k, v in stats().items() if k in DECODE_STATS}
    return case_record("rollout", spec["size"], key, "done", figures)


def timed(fn: Callable[[], int], device: str, repeats: int) -> dict[str, Any]:
    """1 first call (timed: compilation shows there), then the median seconds and tokens/s of `repeats`
    calls (fn returns its tokens)."""
    import torch

    def once() -> tuple[float, int]:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        tokens = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, tokens

    first, _ = once()
    runs = [once() for _ in range(repeats)]
    return {
        "first_seconds": first,
        "seconds": statistics.median(s for s, _ in runs),
        "tokens": runs[0][1],
        "tokens_per_s": statistics.median(n / s for s, n in runs),
    }


def left_padded(ids: list[list[int]], pad: int, device: str) -> tuple[Any, Any]:
    """`ids` left-padded to one width with `pad`, and the attention mask (1 on real tokens)."""
    import torch

    width = max(map(len, ids))
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in ids], device=device)
    starts = torch.tensor([width - len(r) for r in ids], device=device)
    return input_ids, (torch.arange(width, device=device)[None] >= starts[:, None]).long()


def baselines(model: Any, tokenizer: Any, ids: list[list[int]], spec: dict) -> dict[str, Callable[[], int]]:
    """transformers' own generators on the same rows (sampling, no top-k), each returning its tokens."""
    import torch
    from transformers import GenerationConfig

    pad, eos, device, tokens = tokenizer.pad_token_id, tokenizer.eos_token_id, spec["device"], spec["tokens"]
    input_ids, mask = left_padded(ids, pad, device)
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "pad_token_id": pad}

    def generate(**cache: Any) -> int:
        torch.manual_seed(0)  # each call draws the same tokens, as the engines' seed=0 does
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=tokens, **sampling,
                                 **cache)  # fmt: skip
        new = out[:, input_ids.shape[1] :]
        stopped = (new == eos).cumsum(-1)  # tokens up to and including the first end-of-sequence
        return int(((stopped == 0) | ((stopped == 1) & (new == eos))).sum())

    def continuous_batching() -> int:
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        config = GenerationConfig(max_new_tokens=tokens, eos_token_id=eos, **sampling)
        cb = ContinuousBatchingConfig(return_logprobs=True)  # what an engine built on it would need
        out = model.generate_batch(ids, generation_config=config, continuous_batching_config=cb)
        return sum(len(o.generated_tokens) for o in out.values())

    return {
        "generate": generate,
        "generate_static": lambda: generate(cache_implementation="static"),
        "continuous_batching": continuous_batching,
    }
