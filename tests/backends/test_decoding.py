"""The hf engine's decode loops: `static` and `compiled` decode and sample what `dynamic` does, a row's
draw does not depend on its batch, they report the trainer's log-probs, keep and release their caches,
and follow weights changed in place."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from srpo_dsl.backends import BackendError, GenRequest
from srpo_dsl.backends.decoding import LEAST_LENGTH, StaticDecoder, make_decoder, resolve_mode
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.backends.logprobs import sequence_logprobs
from srpo_dsl.models.specs import resolve_model_spec

PROMPTS = ["S 17+25=", "hello", "the answer is the answer is", "S 1+2=", "S 40+2="]
DEVICES = [  # on a GPU machine the compiled loop runs as CUDA graphs: `pytest tests/backends/test_decoding.py`
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]


def load(path: Path | str) -> tuple[torch.nn.Module, object]:
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def random_lm(tiny_random_model: Path):
    """A random model: rows rarely end, so responses run to their limits."""
    return load(tiny_random_model)


@pytest.fixture(scope="module")
def trained_lm():
    """The embedded model: greedy answers end with end-of-sequence after a few tokens."""
    return load(resolve_model_spec("builtin:tiny"))


def requests(limits: list[int], temperature: float = 0.0, top_p: float = 1.0) -> list[GenRequest]:
    return [GenRequest(PROMPTS[i % len(PROMPTS)], m, temperature, top_p) for i, m in enumerate(limits)]


def decoded(lm, mode: str, reqs: list[GenRequest], seed: int = 0):
    model, tokenizer = lm
    return HFBackend(model, tokenizer=tokenizer, decode=mode).generate(reqs, seed=seed)


def assert_same(one, other) -> None:
    assert [r.response_token_ids for r in one] == [r.response_token_ids for r in other]
    assert [r.finish_reason for r in one] == [r.finish_reason for r in other]
    for a, b in zip(one, other):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lm_name", ["random_lm", "trained_lm"])
def test_static_greedy_decodes_what_dynamic_decodes(lm_name, device, request):
    """Rows end at their own limits or at end-of-sequence, in a batch padded from 7 rows to 8, over a
    response long enough to cross a cache-length boundary."""
    model, tokenizer = request.getfixturevalue(lm_name)
    lm = (model if device == "cpu" else load(model.name_or_path)[0].to(device)), tokenizer
    reqs = requests([5, 1, LEAST_LENGTH + 3, 9, 2, 30, 12])
    static = decoded(lm, "static", reqs)
    assert_same(static, decoded(lm, "dynamic", reqs))
    assert [len(r.response_token_ids) for r in static] <= [q.max_tokens for q in reqs]
    if lm_name == "trained_lm":
        assert {r.finish_reason for r in static} == {"eos", "length"}


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9)])
def test_static_samples_report_the_trainers_logprobs_and_reproduce(random_lm, temperature, top_p):
    model, _ = random_lm
    reqs = requests([6] * 4 + [3] * 4, temperature, top_p)  # a prompt repeated: independent draws
    first = decoded(random_lm, "static", reqs, seed=3)
    recomputed = sequence_logprobs(
        model, [r.prompt_token_ids for r in first], [r.response_token_ids for r in first], temperature
    )
    for res, lp in zip(first, recomputed):
        assert torch.allclose(lp, torch.tensor(res.logprobs), atol=1e-4)
    assert_same(first, decoded(random_lm, "static", reqs, seed=3))
    other = decoded(random_lm, "static", reqs, seed=4)
    assert [r.response_token_ids for r in other] != [r.response_token_ids for r in first]
    assert len({tuple(r.response_token_ids) for r in first[:4] + first[5:6]}) > 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9)])
def test_static_samples_what_dynamic_samples(random_lm, device, temperature, top_p):
    """Sampling on: a row's draw at position t depends on its seed, t and its logits only, so the loops
    sample alike (7 rows padded to 8, a prompt repeated, one row past a cache-length boundary)."""
    model, tokenizer = random_lm
    lm = (model if device == "cpu" else load(model.name_or_path)[0].to(device)), tokenizer
    reqs = requests([5, 1, LEAST_LENGTH + 3, 9, 2, 30, 12], temperature, top_p)
    static = decoded(lm, "static", reqs, seed=11)
    assert_same(static, decoded(lm, "dynamic", reqs, seed=11))
    assert len({tuple(r.response_token_ids) for r in static}) == len(reqs)


STOPS = ("4", "n", "e", "=s")  # characters the random model writes now and then, a string it may not
CONTROLS = {  # every sampling control, each alone and all at once
    "top_k": {"top_k": 7},
    "penalties": {"frequency_penalty": 0.7, "presence_penalty": 0.4, "repetition_penalty": 1.5},
    "min_tokens": {"min_tokens": 6},
    "stop": {"stop_strings": STOPS},
    "all": {
        "top_k": 7,
        "frequency_penalty": 0.7,
        "presence_penalty": 0.4,
        "repetition_penalty": 1.5,
        "min_tokens": 6,
        "stop_strings": STOPS,
    },
}


def controlled(limits: list[int], temperature: float, controls: dict) -> list[GenRequest]:
    return [GenRequest(q.prompt, q.max_tokens, temperature, 0.9, **controls) for q in requests(limits)]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("name", list(CONTROLS))
def test_static_honours_the_sampling_controls_as_dynamic_does(random_lm, name, temperature):
    """Each control, greedy and sampled: the same tokens, log-probs, texts and finish reasons in both
    loops (7 rows padded to 8; rows long enough that stop strings end rows at the host's checks); the
    log-probs are the trainer's at the temperature, and a stopped row is the free row cut."""
    model, _ = random_lm
    reqs = controlled([5, 1, LEAST_LENGTH + 3, 9, 2, 30, 12], temperature, CONTROLS[name])
    static = decoded(random_lm, "static", reqs, seed=11)
    assert_same(static, decoded(random_lm, "dynamic", reqs, seed=11))
    assert [r.text for r in static] == [r.text for r in decoded(random_lm, "dynamic", reqs, seed=11)]
    recomputed = sequence_logprobs(
        model, [r.prompt_token_ids for r in static], [r.response_token_ids for r in static], temperature
    )
    for res, lp in zip(static, recomputed):
        assert torch.allclose(lp, torch.tensor(res.logprobs), atol=1e-4)
    if "stop" in CONTROLS[name]:
        free = decoded(
            random_lm,
            "static",
            [
                GenRequest(
                    q.prompt,
                    q.max_tokens,
                    temperature,
                    0.9,
                    **{k: v for k, v in CONTROLS[name].items() if k != "stop"},
                )
                for q in reqs
            ],
            seed=11,
        )
        stopped = [(r, w) for r, w in zip(static, free) if r.finish_reason == "stop"]
        # a row ended at a host check well before its free run ends
        assert any(len(w.response_token_ids) > len(r.response_token_ids) + 8 for r, w in stopped)
        for res, whole in zip(static, free):
            n = len(res.response_token_ids)
            assert res.response_token_ids == whole.response_token_ids[:n]
            assert res.logprobs == whole.logprobs[:n]
            if res.finish_reason == "stop":
                assert res.text.endswith(res.stop_string) and res.stop_string in STOPS
                assert whole.text.startswith(res.text)


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_a_rows_draw_does_not_depend_on_its_batch(random_lm, mode):
    """A request with its own seed samples the same response alone, in a batch, in another order and
    beside other prompts (other padding, another batch size, its prompt shared or not)."""
    model, tokenizer = random_lm
    engine = HFBackend(model, tokenizer=tokenizer, decode=mode)
    reqs = [
        GenRequest(p, m, 1.0, seed=100 + i) for i, (p, m) in enumerate(zip(PROMPTS * 2, [6, 3, 9, 4, 7] * 2))
    ]
    batch = engine.generate(reqs)
    alone = [r for q in reqs for r in engine.generate([q])]
    assert_same(batch, alone)
    others = [GenRequest("S 99+1=", 5, 1.0, seed=7), GenRequest("an unrelated longer prompt here", 8, 1.0)]
    mixed = engine.generate(others[:1] + reqs[::-1] + others[1:])
    assert_same(mixed[1:-1][::-1], batch)
    assert len({tuple(r.response_token_ids) for r in batch}) == len(reqs)  # a repeated prompt draws anew


def test_static_keeps_a_cache_per_shape_emptied_on_reuse_and_released_by_sleep(random_lm):
    model, tokenizer = random_lm
    engine = HFBackend(model, tokenizer=tokenizer, decode="static")
    assert isinstance(engine.decoder, StaticDecoder)
    long, short = requests([20, 4, 7]), requests([3, 3])
    other = [GenRequest(p, q.max_tokens) for p, q in zip(["S 9+9=", "hi", "S 5+5="], long)]  # long's shape
    engine.generate(long, seed=0)
    (cache,) = [b.cache for b in engine.decoder.buffers.values()]
    engine.generate(short, seed=0)  # another shape: a second cache
    assert list(engine.decoder.buffers) == [(4, LEAST_LENGTH, False), (2, LEAST_LENGTH, False)]
    reused = engine.generate(other, seed=0)  # long's cache again: emptied, as good as new
    assert engine.decoder.buffers[(4, LEAST_LENGTH, False)].cache is cache
    assert_same(reused, decoded(random_lm, "static", other))
    engine.sleep()
    assert not engine.decoder.buffers and engine.decoder.stats.cache_bytes == 0
    engine.wake_up()
    assert_same(engine.generate(other, seed=0), reused)


def test_decode_modes_resolve_and_unknown_ones_are_one_line_errors(random_lm):
    assert resolve_mode("auto", torch.device("cpu")) == "dynamic"
    assert resolve_mode("auto", torch.device("cuda")) == "compiled"
    assert resolve_mode("static", torch.device("cuda")) == "static"
    model, tokenizer = random_lm
    with pytest.raises(BackendError, match="unknown decode mode `eager`: expected one of auto, dynamic"):
        HFBackend(model, tokenizer=tokenizer, decode="eager")
    assert HFBackend(model, tokenizer=tokenizer).decoder.mode == "dynamic"  # auto, on CPU


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_decodes_what_dynamic_decodes_and_follows_weights_changed_in_place(random_lm, device):
    """torch.compile (on CPU inductor alone, on CUDA with CUDA graphs; fp32): the same tokens; after an
    in-place update of the weights (what an optimizer step does to the shared module) the compiled
    step decodes with the new weights, not stale ones, on the cache it kept through the update."""
    model, tokenizer = load(random_lm[0].name_or_path)
    model.to(device)
    reqs = requests([7, 2, 5])
    compiled = HFBackend(model, tokenizer=tokenizer, decode="compiled")
    assert_same(compiled.generate(reqs, seed=0), decoded((model, tokenizer), "dynamic", reqs))
    sampled = requests([7, 2, 5], 0.7, 0.9)
    assert_same(compiled.generate(sampled, seed=5), decoded((model, tokenizer), "dynamic", sampled, seed=5))
    before = compiled.generate(reqs, seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    compiled.sleep()  # an update: the compiled step's cache stays (a CUDA graph replays on its buffers)
    (cache,) = [b.cache for b in compiled.decoder.buffers.values()]
    compiled.wake_up()
    after = compiled.generate(reqs, seed=0)
    assert list(compiled.decoder.buffers) == [(4, LEAST_LENGTH, False)]
    assert compiled.decoder.buffers[(4, LEAST_LENGTH, False)].cache is cache
    assert [r.response_token_ids for r in after] != [r.response_token_ids for r in before]
    assert_same(after, decoded((model, tokenizer), "dynamic", reqs))
    controls = controlled([7, 2, 12], 0.8, CONTROLS["all"])
    assert_same(compiled.generate(controls, seed=5), decoded((model, tokenizer), "dynamic", controls, seed=5))


def test_make_decoder_names_its_mode(random_lm):
    model, tokenizer = random_lm
    eos = {tokenizer.eos_token_id}
    modes = {
        m: make_decoder(m, model, tokenizer.pad_token_id, eos).mode for m in ("dynamic", "static", "compiled")
    }
    assert modes == {"dynamic": "dynamic", "static": "static", "compiled": "compiled"}
