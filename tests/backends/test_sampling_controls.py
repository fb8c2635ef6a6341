"""The sampling controls (`GenRequest.stop_strings`, `top_k`, the penalties, `min_tokens`) against hand-computed
values: the top-k cut and its draw, each penalty's formula, the end-of-sequence block, stop-string
truncation, the finish reasons of the three engines, and the recorded log-prob, which stays
`log_softmax(raw logits / T)` whatever shaped the draw."""

from __future__ import annotations

import math

import pytest
import torch

from srpo_dsl.backends import GenRequest
from srpo_dsl.backends.draw import DrawState, Shaping, count, draw, eos_blocked, penalized, prompt_presence
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.backends.logprobs import sequence_logprobs
from srpo_dsl.backends.sampling import counter_uniform, cut_floor, sample_next, sample_scaled
from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.backends.stops import StopWatch, match, occurrences
from srpo_dsl.backends.vllm import finish_of, sampling_params
from srpo_dsl.choices import FINISH_REASONS
from srpo_dsl.models.specs import resolve_model_spec
from tests.support.sampling import chi_square, splitmix_uniform


def kept(scaled: list[float], top_k: int, top_p: float | None = None) -> list[int]:
    row = torch.tensor([scaled])
    floor = cut_floor(row, torch.tensor(top_k), top_p)
    return (row[0] >= floor[0]).nonzero().squeeze(-1).tolist()


def test_top_k_keeps_the_k_largest_and_their_ties():
    scaled = [2.0, 1.0, 1.0, 0.5, 3.0]  # ranked 3, 2, 1, 1, 0.5
    assert kept(scaled, 1) == [4]
    assert kept(scaled, 2) == [0, 4]
    assert kept(scaled, 3) == [0, 1, 2, 4]  # the 3rd largest is 1.0: its tie stays
    assert kept(scaled, 4) == [0, 1, 2, 4]
    assert kept(scaled, 5) == kept(scaled, 99) == [0, 1, 2, 3, 4]  # k past the vocabulary: all
    # top-p over the top-k renormalised: 0.4 0.3 0.2 (0.1) -> k = 3: 4/9 3/9 2/9, 4/9 < 0.7 <= 7/9
    probs = [math.log(p) for p in (0.4, 0.3, 0.2, 0.1)]
    assert kept(probs, 3, 0.7) == [0, 1]
    assert kept(probs, 3, 0.8) == [0, 1, 2]  # 7/9 < 0.8: the third too (without top-k 0.7 + 0.2 too)
    assert kept(probs, 2, 0.99) == [0, 1]  # top-p never widens top-k


def test_the_top_k_draw_is_the_gumbel_argmax_over_the_kept_tokens_by_hand():
    """For seed 5 at position 3 the noise is the SplitMix64 hash (`splitmix_uniform`); the draw is the
    argmax of `logit - log(-log u)` over the two kept tokens only, computed here in Python floats."""
    logits = [1.5, 0.2, 1.4, -3.0, 0.9]
    u = [splitmix_uniform(5, 3, v) for v in range(5)]
    assert torch.tensor(u).tolist() == counter_uniform(torch.tensor([5]), torch.tensor(3), 5)[0].tolist()
    scores = {v: logits[v] - math.log(-math.log(u[v])) for v in (0, 2)}  # k = 2 keeps 1.5 and 1.4
    want = max(scores, key=scores.get)
    got = sample_scaled(
        torch.tensor([logits]), False, None, torch.tensor([5]), torch.tensor(3), torch.tensor(2)
    )
    assert got.tolist() == [want]
    everyone = {v: logits[v] - math.log(-math.log(u[v])) for v in range(5)}
    free = sample_scaled(torch.tensor([logits]), False, None, torch.tensor([5]), torch.tensor(3))
    assert free.tolist() == [max(everyone, key=everyone.get)]


def test_the_top_k_draw_follows_the_renormalised_top_k_softmax():
    """40,000 seeds: probabilities 0.4 0.3 0.2 0.1, k = 2 -> 4/7 and 3/7. A frequency's standard error is
    sqrt(p (1 - p) / n) <= 0.0025, so 0.0125 is 5 of them; Pearson's chi-square (1 degree of freedom)
    below its p = 0.001 value 10.83; the cut tokens never drawn."""
    logits = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1])).expand(40_000, 4)
    tokens = sample_next(logits, 1.0, 1.0, torch.arange(40_000), torch.tensor(0), top_k=2)
    frequencies = torch.bincount(tokens, minlength=4) / 40_000
    assert torch.allclose(frequencies, torch.tensor([4 / 7, 3 / 7, 0.0, 0.0]), atol=0.0125)
    assert chi_square(tokens, [4 / 7, 3 / 7, 0.0, 0.0]) < 10.83


def state(rows: int, vocab: int, **settings) -> DrawState:
    s = DrawState.empty(rows, vocab, "penalties" in settings, torch.device("cpu"))
    s.seeds.copy_(torch.arange(rows))
    s.divisor.fill_(settings.get("temperature", 1.0))
    s.top_k.fill_(settings.get("top_k", 0))
    s.min_tokens.fill_(settings.get("min_tokens", 0))
    if "penalties" in settings:
        s.penalties.copy_(torch.tensor(settings["penalties"]))
    return s


def test_each_penalty_changes_the_logits_as_its_formula_says():
    """Logits 2, -1, 0.5, 0; the response so far holds token 0 twice and token 1 once; the prompt holds
    token 2 (and padding with id 3, which is not seen)."""
    logits = torch.tensor([[2.0, -1.0, 0.5, 0.0]])
    s = state(1, 4, penalties=(0.0, 0.0, 1.0))
    prompt_presence(s.prompt_seen, torch.tensor([[3, 2, 2]]), torch.tensor([[0, 1, 1]]))
    assert s.prompt_seen.tolist() == [[False, False, True, False]]
    count(s, torch.tensor([0]))
    count(s, torch.tensor([1]))
    count(s, torch.tensor([0]))
    assert s.counts.tolist() == [[2.0, 1.0, 0.0, 0.0]]
    cases = {
        (0.5, 0.0, 1.0): [2.0 - 0.5 * 2, -1.0 - 0.5 * 1, 0.5, 0.0],  # frequency: times the count
        (0.0, 0.25, 1.0): [2.0 - 0.25, -1.0 - 0.25, 0.5, 0.0],  # presence: once per present token
        (0.0, 0.0, 2.0): [2.0 / 2, -1.0 * 2, 0.5 / 2, 0.0],  # repetition: response and prompt tokens
        (0.5, 0.25, 2.0): [1.0 - 1.0 - 0.25, -2.0 - 0.5 - 0.25, 0.25, 0.0],  # repetition first
    }
    for penalties, want in cases.items():
        s.penalties.copy_(torch.tensor(penalties))
        assert penalized(logits, s).tolist() == [want], penalties


def test_min_tokens_blocks_end_of_sequence_before_its_position_only():
    logits = torch.tensor([[3.0, 1.0, 0.0], [3.0, 1.0, 0.0]])
    blocked = eos_blocked(logits, torch.tensor([0, 2]), torch.tensor([True, False]))
    assert blocked.tolist() == [[-math.inf, 1.0, -math.inf], [3.0, 1.0, 0.0]]
    s = state(1, 3, min_tokens=2, temperature=1.0)
    flags = Shaping(greedy=True, min_tokens=True)
    picks = [draw(logits[:1], s, flags, torch.tensor(t), torch.tensor([0]))[0].item() for t in range(3)]
    assert picks == [1, 1, 0]  # positions 0 and 1 cannot end; position 2 can


def test_the_recorded_logprob_is_the_raw_tempered_one_under_every_control():
    """Raw logits 2, 1, 0 at T = 0.5: log-probs 4, 2, 0 - log(e^4 + e^2 + 1). Each control changes which
    token is drawn, never the recorded value: a frequency penalty of 1 on token 0 counted 3 times makes
    token 1 the greedy and top-1 pick; min_tokens with end-of-sequence = 0 blocks token 0 too."""
    raw = torch.tensor([[2.0, 1.0, 0.0]])
    norm = math.log(math.exp(4) + math.exp(2) + 1)
    want = {0: 4 - norm, 1: 2 - norm, 2: 0 - norm}
    eos = torch.tensor([0])
    s = state(1, 3, temperature=0.5, top_k=1, penalties=(1.0, 0.0, 1.0))
    for _ in range(3):
        count(s, torch.tensor([0]))
    for flags in (
        Shaping(),
        Shaping(top_k=True),
        Shaping(penalized=True),
        Shaping(greedy=True, penalized=True),
        Shaping(top_k=True, penalized=True),
        Shaping(top_k=True, min_tokens=True),
        Shaping(nucleus=True, top_k=True, penalized=True, min_tokens=True),
    ):
        s.min_tokens.fill_(5 if flags.min_tokens else 0)
        picked, logprob = draw(raw, s, flags, torch.tensor(0), eos)
        assert logprob.item() == pytest.approx(want[picked.item()], abs=1e-6), flags
        if (flags.penalized and (flags.greedy or flags.top_k)) or (flags.min_tokens and flags.top_k):
            assert picked.item() == 1, flags  # penalised 2 - 3 = -1 or blocked: token 1 leads


# a toy vocabulary: a stop string can span tokens, and a token can complete one and bring more characters
TOY = {0: "<", 1: "/calc", 2: ">", 3: " more", 4: ">x", 5: "ab"}


def toy(ids) -> str:
    return "".join(TOY[i] for i in ids)


def test_a_stop_string_cuts_tokens_after_the_one_that_completes_it_and_the_text_after_the_string():
    spanning = match(toy, [5, 0, 1, 2, 3], ["</calc>"])  # "<" "/calc" ">" complete it at token 4
    assert (spanning.tokens, spanning.text, spanning.stop) == (4, "ab</calc>", "</calc>")
    extra = match(toy, [5, 0, 1, 4, 3], ["</calc>"])  # ">x" completes it and brings "x": cut from the text
    assert (extra.tokens, extra.text) == (4, "ab</calc>")
    assert match(toy, [5, 3], ["</calc>"]) is None
    assert match(toy, [5, 0, 1, 2], []) is None
    assert match(toy, [0, 1, 2, 5], ["b", "calc>"]).stop == "calc>"  # ends first
    tie = match(toy, [0, 1, 2], ["c>", "</calc>"])  # both end at the same character: the earlier start
    assert (tie.stop, tie.text) == ("</calc>", "</calc>")
    assert occurrences("abab", ["ab", "bab"]) == [(2, 0, "ab"), (4, 1, "bab"), (4, 2, "ab")]


def test_min_tokens_holds_back_a_stop_string_completed_too_early():
    ids = [0, 1, 2, 0, 1, 2]  # "</calc></calc>": completed by tokens 3 and 6 (positions 2 and 5)
    assert match(toy, ids, ["</calc>"], min_tokens=2).tokens == 3  # position 2 >= 2
    late = match(toy, ids, ["</calc>"], min_tokens=3)
    assert (late.tokens, late.text) == (6, "</calc></calc>")
    assert match(toy, ids, ["</calc>"], min_tokens=6) is None
    watch = StopWatch(toy, lambda many: [toy(x) for x in many], [["</calc>"], []], [3, 0])
    assert watch.watches(0) and not watch.watches(1)
    assert watch.reached([0], [ids[:3]], 0) == [False]  # found, but held back
    assert watch.reached([0, 1], [ids, ids], 3) == [True, False]


@pytest.fixture(scope="module")
def tiny() -> HFBackend:
    """The embedded model: greedy on "S 17+25=" it answers `\\boxed{42}` then end-of-sequence, in the
    tokens `\\boxed{`, `4`, `2`, `}`, `</s>`."""
    return HFBackend(resolve_model_spec("builtin:tiny"))


def test_the_hf_engine_finishes_by_eos_stop_string_or_length(tiny):
    q = "S 17+25="
    eos, stop, length, spanning, extra = tiny.generate(
        [
            GenRequest(q, 12, 0.0),
            GenRequest(q, 12, 0.0, stop_strings=("2",)),
            GenRequest(q, 2, 0.0),
            GenRequest(q, 12, 0.0, stop_strings=("{4",)),  # spans `\boxed{` and `4`
            GenRequest(q, 12, 0.0, stop_strings=("box",)),  # completed by `\boxed{`, which brings `ed{` too
        ]
    )
    assert (eos.finish_reason, eos.text, eos.stop_string, len(eos.response_token_ids)) == (
        "eos",
        "\\boxed{42}",
        None,
        5,
    )
    assert (stop.finish_reason, stop.text, stop.stop_string) == ("stop", "\\boxed{42", "2")
    assert stop.response_token_ids == eos.response_token_ids[:3] and stop.logprobs == eos.logprobs[:3]
    assert (length.finish_reason, length.text) == ("length", "\\boxed{4")
    assert (spanning.text, spanning.response_token_ids) == ("\\boxed{4", eos.response_token_ids[:2])
    assert (extra.text, extra.response_token_ids, extra.logprobs) == (
        "\\box",
        eos.response_token_ids[:1],
        eos.logprobs[:1],
    )
    assert {r.finish_reason for r in (eos, stop, length)} == set(FINISH_REASONS)


def test_min_tokens_in_the_hf_engine_holds_back_eos_and_early_stop_strings(tiny):
    """Greedy, the answer's `}` is at position 3 and end-of-sequence at 4; held back to position 8, the
    model repeats `}` until it may end. A stop string `}` counts from position min_tokens: at 3 it ends
    the turn, at 4 it is held back and the turn ends by end-of-sequence."""
    q = "S 17+25="
    free, held, at, after = tiny.generate(
        [
            GenRequest(q, 30, 0.0),
            GenRequest(q, 30, 0.0, min_tokens=8),
            GenRequest(q, 30, 0.0, stop_strings=("}",), min_tokens=3),
            GenRequest(q, 30, 0.0, stop_strings=("}",), min_tokens=4),
        ]
    )
    assert len(free.response_token_ids) == 5 and free.response_token_ids[4] in tiny.eos_ids
    ids = held.response_token_ids
    assert held.finish_reason == "eos" and len(ids) == 9 and not set(ids[:8]) & tiny.eos_ids
    assert ids[:4] == free.response_token_ids[:4] and held.text == "\\boxed{42}}}}}"
    assert (at.finish_reason, at.stop_string, at.response_token_ids) == ("stop", "}", ids[:4])
    assert (after.finish_reason, after.stop_string, after.text) == ("eos", None, "\\boxed{42}")


def test_penalties_shape_the_draw_but_the_logprobs_stay_the_trainers(tiny):
    """Greedy with a large presence penalty never repeats a token; sampled with every control, the
    recorded log-probs are what the trainer recomputes at the temperature."""
    [free, unique] = tiny.generate(
        [
            GenRequest("S 17+25=", 20, 0.0, min_tokens=15),
            GenRequest("S 17+25=", 20, 0.0, min_tokens=15, presence_penalty=100.0),
        ]
    )
    assert len(set(free.response_token_ids)) < len(free.response_token_ids)  # `}` repeats
    assert len(set(unique.response_token_ids)) == len(unique.response_token_ids)
    controls = {"top_k": 5, "frequency_penalty": 0.5, "presence_penalty": 0.3, "repetition_penalty": 1.3}
    reqs = [
        GenRequest(p, 10, 0.7, top_p=0.9, seed=i, min_tokens=3, **controls)
        for i, p in enumerate(["S 17+25=", "S 3+4=", "hi"])
    ]
    results = tiny.generate(reqs)
    recomputed = sequence_logprobs(
        tiny.model, [r.prompt_token_ids for r in results], [r.response_token_ids for r in results], 0.7
    )
    for res, lp in zip(results, recomputed):
        assert torch.allclose(lp, torch.tensor(res.logprobs), atol=1e-4)


def test_the_scripted_engine_cuts_at_stop_strings_in_its_unit():
    engine = ScriptedBackend({"solver": ["<calc>1+2</calc> more", "x</calc>"]})
    cut, short = engine.generate([GenRequest("p", 30, role="solver", stop_strings=("</calc>",))] * 2)
    assert (cut.text, cut.finish_reason, cut.stop_string) == ("<calc>1+2</calc>", "stop", "</calc>")
    assert cut.response_token_ids == list(b"<calc>1+2</calc>") and cut.logprobs == [0.0] * 16
    assert (short.text, short.finish_reason) == ("x</calc>", "stop")
    held, whole = engine.generate(
        [GenRequest("p", 30, role="solver", stop_strings=("</calc>", "x"), min_tokens=1)] * 2
    )
    assert held.finish_reason == "stop" and held.text == "<calc>1+2</calc>"
    assert (whole.finish_reason, whole.stop_string, whole.text) == (
        "stop",
        "</calc>",
        "x</calc>",
    )  # x at 0 held
    plain, cut_short = engine.generate(
        [GenRequest("p", 30, role="solver"), GenRequest("p", 3, role="solver")]
    )
    assert (plain.finish_reason, plain.stop_string) == ("eos", None)
    assert (cut_short.finish_reason, cut_short.text) == ("length", "x</")
    [before] = engine.generate(
        [GenRequest("p", 5, role="solver", stop_strings=("<c",), top_k=1, presence_penalty=2.0)]
    )
    assert (before.text, before.finish_reason) == ("<c", "stop")  # the other controls change nothing
    assert engine.cut == 1


def test_vllm_finish_reasons_and_sampling_params_map_one_to_one():
    assert finish_of("stop", None) == ("eos", None)
    assert finish_of("stop", 151645) == ("eos", None)  # a stop token id ends as the end of sequence
    assert finish_of("stop", "</calc>") == ("stop", "</calc>")
    assert finish_of("length", None) == ("length", None)
    with pytest.raises(Exception, match="finish_reason `abort`"):
        finish_of("abort", None)
    request = GenRequest(
        "p",
        7,
        0.8,
        0.9,
        stop_strings=("</a>", "\n"),
        top_k=20,
        frequency_penalty=0.1,
        presence_penalty=0.2,
        repetition_penalty=1.1,
        min_tokens=2,
    )
    assert sampling_params(request, 5) == {
        "n": 1,
        "temperature": 0.8,
        "top_p": 0.9,
        "top_k": 20,
        "frequency_penalty": 0.1,
        "presence_penalty": 0.2,
        "repetition_penalty": 1.1,
        "min_tokens": 2,
        "stop": ["</a>", "\n"],
        "include_stop_str_in_output": True,
        "max_tokens": 7,
        "logprobs": 0,
        "seed": 5,
    }
    assert sampling_params(GenRequest("p", 3), None)["top_k"] == -1  # off: -1, which every vLLM reads so


def test_a_conversation_cut_at_a_stop_string_keeps_the_kv_of_its_cut_reply(tiny):
    """`dynamic` keeps a conversation's KV for its next turn under its prompt and reply but the last
    token; a reply cut at a stop string is kept as cut (not as decoded past the stop), so the next turn
    finds it and decodes what a whole prefill decodes."""
    engine = HFBackend(resolve_model_spec("builtin:tiny"), decode="dynamic")
    chat = engine.chat_encoder()
    first = [
        GenRequest("", 12, 0.0, prompt_ids=tuple(chat.first(q)), prefix=0, stop_strings=("2",))
        for q in ("S 17+25=", "S 40+2=")
    ]
    replies = engine.generate(first)
    assert [r.finish_reason for r in replies] == ["stop", "stop"] and [
        len(r.response_token_ids) for r in replies
    ] == [3, 3]
    keys = {key for key, _ in engine.decoder.turns.entries}
    assert keys == {(*q.prompt_ids, *r.response_token_ids[:-1]) for q, r in zip(first, replies)}
    second = []
    for q, r in zip(first, replies):
        so_far = [*q.prompt_ids, *r.response_token_ids]
        second.append(
            GenRequest("", 6, 0.0, prompt_ids=(*so_far, *chat.then(" ok ", so_far)), prefix=len(so_far))
        )
    again = engine.generate(second)
    assert not engine.decoder.turns.entries or keys.isdisjoint(k for k, _ in engine.decoder.turns.entries)
    whole = tiny.generate([GenRequest("", 6, 0.0, prompt_ids=q.prompt_ids) for q in second])
    assert [r.response_token_ids for r in again] == [r.response_token_ids for r in whole]
