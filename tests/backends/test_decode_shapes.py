"""The static decode loops' shapes and caches: a team's row counts and lengths fall in a few power-of-two
buckets, a kept cache is counted in bytes exactly as allocated, the kept caches stay under their cap
(least recently used dropped first) without changing a draw, and the compiled step is one graph per
token with its compile reported apart."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, Qwen3Config

from srpo_dsl.backends import GenRequest
from srpo_dsl.backends.decode_step import kv_cache_bytes
from srpo_dsl.backends.decoding import LEAST_LENGTH, bucket
from srpo_dsl.backends.hf import HFBackend

PROMPTS = ["S 17+25=", "hello", "the answer is the answer is", "S 1+2=", "S 40+2="]


@pytest.fixture(scope="module")
def lm(tiny_random_model: Path):
    model = AutoModelForCausalLM.from_pretrained(tiny_random_model).eval()
    return model, AutoTokenizer.from_pretrained(tiny_random_model)


def requests(rows: int, tokens: int, temperature: float = 1.0) -> list[GenRequest]:
    return [GenRequest(PROMPTS[i % len(PROMPTS)], tokens, temperature, seed=i) for i in range(rows)]


def test_sizes_fall_in_power_of_two_buckets():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 24, 64, 65)] == [1, 2, 4, 4, 8, 8, 16, 32, 64, 128]
    assert [bucket(n, 64) for n in (1, 30, 64, 65, 200, 513)] == [64, 64, 64, 128, 256, 1024]


def test_a_team_s_row_counts_share_a_few_shapes(lm):
    """A router's 3 rows, K = 5, 6 and 8 solvers' rows, a verifier's 7: two shapes, not five."""
    model, tokenizer = lm
    engine = HFBackend(model, tokenizer=tokenizer, decode="static")
    for rows in (3, 5, 6, 8, 7):
        engine.generate(requests(rows, 4))
    assert list(engine.decoder.buffers) == [(4, LEAST_LENGTH, False), (8, LEAST_LENGTH, False)]


def test_cache_bytes_by_hand_at_the_0_6b_shape():
    """Qwen3-0.6B: 28 layers, 8 key-value heads of 128, bf16. 512 rows x 256 tokens: 2 x 28 x 8 x 128 x
    512 x 256 x 2 bytes = 15,032,385,536 (14 GiB)."""
    config = Qwen3Config(num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128)
    assert kv_cache_bytes(config, 512, 256, torch.bfloat16) == 15_032_385_536
    assert kv_cache_bytes(config, 1, 1, torch.float32) == 2 * 28 * 8 * 128 * 4
    gpt2 = GPT2Config(n_layer=3, n_embd=64, n_head=4)  # no kv heads nor head dim: heads, hidden / heads
    assert kv_cache_bytes(gpt2, 2, 64, torch.float32) == 2 * 3 * 4 * 16 * 2 * 64 * 4


def allocated(engine: HFBackend) -> int:
    """The bytes of every kept cache's key and value tensors, as allocated."""
    return sum(
        layer.keys.nbytes + layer.values.nbytes
        for b in engine.decoder.buffers.values()
        for layer in b.cache.layers
    )


def test_kept_caches_are_counted_as_allocated_and_capped_least_recent_first(lm):
    model, tokenizer = lm
    row = 2 * 1 * 2 * 8 * 64 * 4  # 1 layer, 2 kv heads of 8, 64 tokens, fp32: 8 KiB a row
    assert kv_cache_bytes(model.config, 4, 64, torch.float32) == 4 * row == 32_768
    engine = HFBackend(model, tokenizer=tokenizer, decode="static")
    plain = [engine.generate(requests(rows, 6)) for rows in (3, 7, 2)]
    assert engine.decoder.stats.cache_bytes == allocated(engine) == (4 + 8 + 2) * row
    capped = HFBackend(model, tokenizer=tokenizer, decode="static")
    capped.decoder.stats.cache_cap = 12 * row
    again = [capped.generate(requests(rows, 6)) for rows in (3, 7, 2)]
    assert list(capped.decoder.buffers) == [(8, 64, False), (2, 64, False)]  # 4 + 8 + 2 rows would pass
    assert capped.decoder.stats.cache_bytes == allocated(capped) == 10 * row
    capped.generate(requests(60, 6))  # alone over the cap: every other shape goes, this one is kept
    assert list(capped.decoder.buffers) == [(64, 64, False)]
    assert capped.decoder.stats.cache_bytes == allocated(capped) == 64 * row
    ids = lambda results: [r.response_token_ids for r in results]  # noqa: E731
    assert [ids(r) for r in again] == [ids(r) for r in plain]
    assert ids(capped.generate(requests(3, 6))) == ids(plain[0])  # its cache made anew, same draws


def host_ops(engine: HFBackend, reqs: list[GenRequest]) -> int:
    """Top-level torch ops launched by the host during a decode, outside the compiled region."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.generate(reqs)

    def compiled(event) -> bool:
        parent = event.cpu_parent
        while parent is not None:
            if parent.name.startswith(("Torch-Compiled Region", "CompiledFunction")):
                return True
            parent = parent.cpu_parent
        return False

    return sum(
        e.name.startswith("aten::")
        and not compiled(e)
        and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
        for e in prof.events()
    )


@pytest.mark.slow
def test_the_compiled_step_launches_one_graph_per_token_and_reports_its_compile(lm):
    """Per decoded token the host launches nothing but the compiled step (its check that every row ended,
    every 8 tokens, aside): 20 more tokens cost at most 10 more ops outside it, where the eager loop
    launches well over a hundred per token. The first call of a variant is its compile, counted and
    timed once; a second call of it compiles nothing."""
    model, tokenizer = lm
    engine = HFBackend(model, tokenizer=tokenizer, decode="compiled")
    stats = engine.decoder.stats
    first = engine.generate(requests(3, 20))
    assert stats.decode_shapes == 1 and stats.compile_s > 0
    seconds = stats.compile_s
    assert engine.generate(requests(3, 20)) == first
    assert (stats.decode_shapes, stats.compile_s) == (1, seconds)
    short, long = host_ops(engine, requests(3, 20)), host_ops(engine, requests(3, 40))
    assert stats.decode_shapes == 1  # 23 and 43 tokens of prompt and response: one length bucket
    assert max(len(r.response_token_ids) for r in engine.generate(requests(3, 40))) == 40
    assert long - short <= 10, (short, long)
    eager = HFBackend(model, tokenizer=tokenizer, decode="static")
    assert host_ops(eager, requests(3, 40)) - host_ops(eager, requests(3, 20)) > 20 * 100
