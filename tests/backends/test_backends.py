"""Backends (hf, scripted, vllm guard), the shared log-prob math and prompt rendering."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from srpo_dsl.backends import BackendError, GenRequest, make_backend
from srpo_dsl.backends.base import NOT_DOWNLOADED, RolloutEngine, model_load_error
from srpo_dsl.backends.chat import encode_prompts
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.backends.logprobs import (
    distinct_rows,
    pack_sequences,
    pad_rows,
    response_logprobs,
    sequence_logprobs,
    token_logprobs,
)
from srpo_dsl.backends.sampling import counter_uniform, nucleus_floor, sample_next
from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.rl.distributed.process_group import Dist
from srpo_dsl.rl.engines.policies import load_model
from srpo_dsl.runtime.prompts import CONTEXT_VARIABLES, PromptError, PromptRenderer
from tests.support.sampling import chi_square, splitmix_uniform

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
PROMPTS = ["S 17+25=", "hello", "the answer is the answer is", "S 1+2="]


@pytest.fixture(scope="module")
def backend(tiny_random_model: Path) -> HFBackend:
    return HFBackend(tiny_random_model)


def _requests(temperature: float, max_tokens: tuple[int, ...] = (5, 9, 1, 7)) -> list[GenRequest]:
    return [GenRequest(p, m, temperature) for p, m in zip(PROMPTS, max_tokens)]


# --- hf ------------------------------------------------------------------------------------


def test_hf_results_in_request_order_and_truncated(backend: HFBackend) -> None:
    mixed = _requests(1.0)[:2] + _requests(0.0)[2:] + [GenRequest("hello", 3, 0.7)]
    results = backend.generate(mixed, seed=0)
    expected = encode_prompts(backend.tokenizer, [r.prompt for r in mixed], backend.use_chat_template)
    assert [r.prompt_token_ids for r in results] == expected
    for req, res in zip(mixed, results):
        assert 1 <= len(res.response_token_ids) <= req.max_tokens
        assert len(res.logprobs) == len(res.response_token_ids)
        eos = [k for k, t in enumerate(res.response_token_ids) if t in backend.eos_ids]
        if res.finish_reason == "eos":
            assert eos == [len(res.response_token_ids) - 1]
        else:
            assert res.finish_reason == "length" and not eos and len(res.response_token_ids) == req.max_tokens


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_hf_logprobs_match_a_separate_forward_pass(backend: HFBackend, temperature: float) -> None:
    results = backend.generate(_requests(temperature), seed=1)
    recomputed = sequence_logprobs(
        backend.model,
        [r.prompt_token_ids for r in results],
        [r.response_token_ids for r in results],
        temperature,
    )
    for res, lp in zip(results, recomputed):
        assert torch.allclose(lp, torch.tensor(res.logprobs), atol=1e-4)


def test_token_logprobs_is_differentiable_and_masked(backend: HFBackend) -> None:
    batch = pack_sequences([[1, 5, 6], [1, 7]], [[8, 9], [10, 11, 12]], backend.pad_id)
    assert batch.response_mask.sum().item() == 5
    lp = token_logprobs(backend.model, batch.input_ids, batch.attention_mask, batch.response_mask)
    assert lp.shape == batch.input_ids.shape and (lp[~batch.response_mask] == 0).all()
    lp.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in backend.model.parameters())
    backend.model.zero_grad(set_to_none=True)


def test_hf_seed_reproduces(backend: HFBackend) -> None:
    def tokens(seed: int) -> list[list[int]]:
        return [r.response_token_ids for r in backend.generate(_requests(1.0, (8,) * 4), seed=seed)]

    assert tokens(3) == tokens(3)
    assert tokens(3) != tokens(4)


def test_hf_chat_template_on_and_off(tiny_random_model: Path) -> None:
    chat = HFBackend(tiny_random_model)
    raw = HFBackend(tiny_random_model, use_chat_template=False)
    assert chat.use_chat_template and not raw.use_chat_template
    [with_chat] = chat.generate([GenRequest("hello", 2, 0.0)])
    [plain] = raw.generate([GenRequest("hello", 2, 0.0)])
    tok = chat.tokenizer
    assert tok.decode(with_chat.prompt_token_ids) == "<|user|>hello<|assistant|>"
    assert plain.prompt_token_ids == [tok.bos_token_id, *tok("hello", add_special_tokens=False)["input_ids"]]


def test_hf_wraps_an_in_memory_model_and_loads_weights(tiny_random_model: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_random_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model)
    with pytest.raises(BackendError, match="needs its tokenizer"):
        HFBackend(model)
    shared = HFBackend(model, tokenizer=tokenizer)
    assert shared.model is model and shared.version == 0
    model.train()
    shared.generate([GenRequest("hello", 2)])
    assert model.training  # generation leaves the trainer's mode alone
    assert isinstance(shared, RolloutEngine) and not shared.merged_weights
    assert shared.load_weights() == 1
    zeros = ((k, torch.zeros_like(v)) for k, v in model.named_parameters())  # streamed, one at a time
    assert shared.load_weights(zeros) == 2
    assert all((p == 0).all() for p in model.parameters())
    shared.sleep()
    with pytest.raises(BackendError, match="asleep"):
        shared.generate([GenRequest("hello", 2)])
    shared.wake_up(("weights",))
    assert len(shared.generate([GenRequest("hello", 2)])) == 1


def test_hf_load_error_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="cannot load model") as err:
        HFBackend(tmp_path / "missing")
    assert "\n" not in str(err.value) and NOT_DOWNLOADED not in str(err.value)  # a path: nothing to download


def test_a_load_error_of_a_hub_model_not_downloaded_says_what_it_needs(tmp_path: Path) -> None:
    """A repo id missing from the Hugging Face cache: its load error (the hub's "couldn't connect" offline)
    says that it is downloaded on first use; a local folder's does not; the trainer's load says the same."""
    unseen = model_load_error("srpo-dsl-tests/never-published", OSError("We couldn't connect\nmore"))
    assert (
        str(unseen)
        == f"cannot load model `srpo-dsl-tests/never-published`: We couldn't connect ({NOT_DOWNLOADED})"
    )
    assert str(model_load_error(str(tmp_path), ValueError("bad config"))) == (
        f"cannot load model `{tmp_path}`: bad config"
    )
    with pytest.raises(BackendError, match=f"^cannot load model `{tmp_path}`: "):
        load_model(str(tmp_path), Dist(0, 0, 1, torch.device("cpu")))  # an empty folder: no config


def test_hf_shares_a_repeated_prompt_and_stops_rows_at_their_own_limits(backend: HFBackend) -> None:
    requests = [GenRequest("S 17+25=", 9, 1.0)] * 8 + [
        GenRequest("hello", 2, 1.0),
        GenRequest("S 17+25=", 1, 1.0),
    ]
    results = backend.generate(requests, seed=5)
    assert len({tuple(r.response_token_ids) for r in results[:8]}) > 1  # one prefill, independent draws
    assert [len(r.response_token_ids) <= q.max_tokens for r, q in zip(results, requests)] == [True] * 10
    assert len(results[9].response_token_ids) == 1
    recomputed = sequence_logprobs(
        backend.model, [r.prompt_token_ids for r in results], [r.response_token_ids for r in results]
    )
    for res, lp in zip(results, recomputed):
        assert torch.allclose(lp, torch.tensor(res.logprobs), atol=1e-4)


def kept_by_nucleus(probs: list[list[float]], top_p: float) -> torch.Tensor:
    """The tokens the nucleus cut keeps, for these probabilities (their logs are the tempered logits)."""
    scaled = torch.tensor(probs).log()
    return scaled >= nucleus_floor(scaled, top_p)


def test_nucleus_keeps_the_smallest_set_reaching_top_p() -> None:
    probs = [[0.15, 0.5, 0.05, 0.3]]
    assert kept_by_nucleus(probs, 0.7).tolist() == [[False, True, False, True]]  # 0.5 < 0.7 <= 0.5 + 0.3
    assert kept_by_nucleus(probs, 0.5).tolist() == [[False, True, False, False]]
    assert kept_by_nucleus(probs, 0.1).tolist() == [[False, True, False, False]]  # the top token stays
    assert kept_by_nucleus(probs, 0.96).tolist() == [[True, True, True, True]]
    tied = [[0.2, 0.4, 0.2, 0.2]]  # 0.4 < 0.5, then one 0.2 reaches it: its ties stay too
    assert kept_by_nucleus(tied, 0.5).tolist() == [[True, True, True, True]]
    assert kept_by_nucleus(tied, 0.4).tolist() == [[False, True, False, False]]


def test_counter_noise_is_the_splitmix_hash_of_seed_position_and_entry() -> None:
    """Vectorised int64 tensor ops (wrapping products, masked shifts) give the unsigned 64-bit hash exactly,
    seeds with the top bit set and positions per row or shared alike."""
    seeds = [0, 1, 2**40 + 3, 2**63 - 1]
    shared = counter_uniform(torch.tensor(seeds), torch.tensor(9), 33)
    per_row = counter_uniform(torch.tensor(seeds), torch.tensor([0, 5, 9, 2**31]), 33)
    for i, seed in enumerate(seeds):
        assert shared[i].tolist() == [splitmix_uniform(seed, 9, v) for v in range(33)]
        assert per_row[i].tolist() == [splitmix_uniform(seed, [0, 5, 9, 2**31][i], v) for v in range(33)]
    assert shared.dtype == torch.float32 and shared.min() > 0 and shared.max() < 1
    assert torch.equal(shared[2], per_row[2])


# Pearson's chi-square at p = 0.001, by the number of possible tokens (2 and 1 degrees of freedom)
CRITICAL = {3: 13.82, 2: 10.83}


@pytest.mark.parametrize(
    ("temperature", "top_p", "probs"),
    [
        (1.0, 1.0, [0.5, 0.3, 0.2, 0.0]),
        (0.5, 1.0, [25 / 38, 9 / 38, 4 / 38, 0.0]),  # T = 0.5 squares the probabilities: 25 : 9 : 4 of 38
        (1.0, 0.6, [0.625, 0.375, 0.0, 0.0]),  # {0.5, 0.3} renormalised
    ],
)
def test_sample_next_draws_from_the_tempered_distribution(temperature, top_p, probs) -> None:
    """40,000 draws of one logits vector, by 40,000 seeds at one position and by one seed along 40,000
    positions: frequencies within 0.01 of the distribution and Pearson's chi-square below p = 0.001."""
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2, 0.0])).expand(40_000, 4)
    by_seed = sample_next(logits, temperature, top_p, torch.arange(40_000), torch.tensor(0))
    along = sample_next(logits, temperature, top_p, torch.full((40_000,), 7), torch.arange(40_000))
    for tokens in (by_seed, along):
        frequencies = torch.bincount(tokens, minlength=4) / 40_000
        assert torch.allclose(frequencies, torch.tensor(probs), atol=0.01)
        assert chi_square(tokens, probs) < CRITICAL[sum(p > 0 for p in probs)]
    assert not torch.equal(by_seed, along)


def test_sample_next_is_greedy_at_temperature_zero() -> None:
    logits = torch.tensor([[0.1, 2.0, 0.3], [5.0, 0.0, 4.9]])
    assert sample_next(logits, 0.0, 1.0, torch.tensor([1, 2]), torch.tensor(0)).tolist() == [1, 0]


# --- the shared log-prob math --------------------------------------------------------------


def test_pad_rows_and_distinct_rows() -> None:
    ids, mask = pad_rows([[5, 6], [7]], 0, 3, left=True)
    assert ids.tolist() == [[0, 5, 6], [0, 0, 7]] and mask.tolist() == [[0, 1, 1], [0, 0, 1]]
    ids, mask = pad_rows([[5, 6], [7]], 9, 3, left=False)
    assert ids.tolist() == [[5, 6, 9], [7, 9, 9]] and mask.tolist() == [[1, 1, 0], [1, 0, 0]]
    assert distinct_rows([[1, 2], [3], [1, 2], [3], [4]]) == ([[1, 2], [3], [4]], [0, 1, 0, 1, 2])


def test_response_logprobs_equal_one_packed_forward(backend: HFBackend) -> None:
    """Sharing each prompt's cache gives the log-probs, entropies and gradients of a plain forward."""
    prompts = [[1, 5, 6], [1, 7], [1, 5, 6], [1, 5, 6], [1, 7]]
    responses = [[8, 9], [10, 11, 12], [8], [13, 14, 15, 16], [10]]
    model = backend.model
    batch = pack_sequences(prompts, responses, backend.pad_id)
    lp, h = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, 0.7, True)
    starts = torch.tensor([len(p) for p in prompts])
    cols = (starts[:, None] + torch.arange(4)).clamp(max=batch.input_ids.shape[1] - 1)
    expected_lp, expected_h = lp.gather(1, cols), h.gather(1, cols)
    shared_lp, shared_h = response_logprobs(
        model, prompts, responses, backend.pad_id, 0.7, backend.device, True
    )
    assert shared_lp.shape == (5, 4)
    assert torch.allclose(shared_lp, expected_lp, atol=1e-5) and torch.allclose(
        shared_h, expected_h, atol=1e-5
    )
    assert (shared_lp[2, 1:] == 0).all() and (shared_lp[4, 1:] == 0).all()
    alone, no_entropy = response_logprobs(model, prompts, responses, backend.pad_id, 0.7, backend.device)
    assert no_entropy is None and torch.equal(alone, shared_lp)
    weights = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    grads = []
    for values in (expected_lp, shared_lp):
        model.zero_grad(set_to_none=True)
        (weights * values).sum().backward(retain_graph=True)
        grads.append([p.grad.clone() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads))


# --- scripted ------------------------------------------------------------------------------


def test_scripted_cycles_per_role(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({"solver": ["\\boxed{1}", "\\boxed{2}"], "*": ["ok"]}))
    backend = make_backend("scripted", str(script))
    reqs = [GenRequest("p", 20, role=r) for r in ["solver", "verifier", "solver", "solver", "judge"]]
    out = backend.generate(reqs)
    assert [r.text for r in out] == ["\\boxed{1}", "ok", "\\boxed{2}", "\\boxed{1}", "ok"]
    assert out[0].response_token_ids == list(b"\\boxed{1}") and out[0].logprobs == [0.0] * 9
    assert out[0].prompt_token_ids == [ord("p")] and out[0].finish_reason == "eos"
    [cut] = backend.generate([GenRequest("p", 3, role="verifier")])
    assert cut.text == "ok" and cut.finish_reason == "eos"
    [cut] = backend.generate([GenRequest("p", 4, role="solver")])
    assert cut.text == "\\box" and cut.finish_reason == "length"


def test_scripted_counts_a_local_tokenizers_tokens_and_the_replies_it_cuts() -> None:
    """With the policy's tokenizer (builtin:tiny's, shipped) a reply is cut at max_tokens of its tokens,
    not bytes; every cut reply is counted once (the run's warning); without one, bytes as before."""
    from transformers import AutoTokenizer

    from srpo_dsl.models.specs import local_tokenizer
    from srpo_dsl.models.tiny import SHIPPED

    assert local_tokenizer("builtin:tiny") == str(SHIPPED)
    long, short = "\\boxed{4} because four is the answer", "\\boxed{4}"
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    ids = tokenizer.encode(long, add_special_tokens=False)
    assert len(ids) > 8 > len(tokenizer.encode(short, add_special_tokens=False))
    backend = ScriptedBackend({"solver": [long, short]}, tokenizer=SHIPPED)
    cut, whole = backend.generate([GenRequest("Q: 2+2", 8, role="solver")] * 2)
    assert cut.response_token_ids == ids[:8] and cut.finish_reason == "length"
    assert cut.text == tokenizer.decode(ids[:8]) and long.startswith(cut.text.strip())
    assert whole.text == short and whole.finish_reason == "eos"
    assert cut.prompt_token_ids == tokenizer.encode("Q: 2+2", add_special_tokens=False)
    assert backend.cut == 1 and backend.unit == "tiny-v1's tokens"
    in_bytes = ScriptedBackend({"solver": [long, short]})
    in_bytes.generate([GenRequest("p", 10, role="solver")] * 4)
    assert in_bytes.cut == 2 and in_bytes.unit == "UTF-8 bytes"  # 36 bytes (cut at 10) and 9 (not), twice


def test_a_tokenizer_not_on_this_machine_is_none(tmp_path: Path) -> None:
    from srpo_dsl.models.specs import local_tokenizer

    assert local_tokenizer("srpo-dsl-tests/never-downloaded") is None  # no hub request is made
    assert local_tokenizer(str(tmp_path)) is None  # a folder without tokenizer files
    (tmp_path / "tokenizer.json").write_text("{}")
    assert local_tokenizer(f"hf:{tmp_path}") == str(tmp_path)


def test_scripted_errors() -> None:
    with pytest.raises(BackendError, match="no entry for role `verifier`"):
        ScriptedBackend({"solver": ["x"]}).generate([GenRequest("p", 4, role="verifier")])
    with pytest.raises(BackendError, match="non-empty lists of strings"):
        ScriptedBackend({"solver": []})
    with pytest.raises(BackendError, match="cannot read the reply script"):
        ScriptedBackend(Path("/nonexistent/replies.json"))


# --- vllm and the factory ----------------------------------------------------------------


def test_vllm_import_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(BackendError) as err:
        make_backend("vllm", "some/model")
    assert (
        str(err.value)
        == "the vllm backend needs the optional extra: pip install 'srpo-dsl[vllm]' (CUDA GPU required)"
    )


def test_factory(tiny_random_model: Path) -> None:
    from srpo_dsl.models.specs import resolve_model_spec

    assert isinstance(make_backend("hf", resolve_model_spec(f"hf:{tiny_random_model}")), HFBackend)
    assert resolve_model_spec("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"
    with pytest.raises(BackendError, match="unknown backend `tgi`"):
        make_backend("tgi", "m")


# --- prompts -------------------------------------------------------------------------------


def _context(team: list[dict]) -> dict:
    task = {"id": "t1", "question": "17+25", "answer": "42", "answers": ["42"]}
    return {
        "task": task,
        "step": 1,
        "turn": 1,
        "max_turns": 1,
        "role": "solver",
        "replica": 1,
        "pool_size": 2,
        "team_context": team,
        "feedback": [],
        "documents": [],
        "observations": [],
        "observation": None,
        "memory": {"accepted": [], "feedback": [], "documents": [], "observations": []},
        "actions": [],
        "history": [],
        "new_history": [],
    }


def test_prompt_renderer_renders_the_quickstart_templates() -> None:
    renderer = PromptRenderer([WORKFLOWS])
    team = [
        {"role": "solver", "replica": 1, "text": "\\boxed{42}", "valid": True, "value": "42"},
        {"role": "solver", "replica": 2, "text": "\\boxed{4", "valid": False, "value": None},
    ]
    assert renderer.render("quickstart/solver.j2", _context([])) == "S 17+25="
    assert renderer.render("quickstart/verifier.j2", _context(team)) == "V 17+25= 42 ?"
    assert renderer.render("quickstart/aggregator.j2", _context(team)) == "A 17+25= 42 ?"
    assert renderer.render("default_role.j2", _context(team)).startswith("Question: 17+25\n")


def test_prompt_errors_name_template_and_variable(tmp_path: Path) -> None:
    (tmp_path / "bad.j2").write_text("Q: {{ task.question }} {{ hint }}")
    renderer = PromptRenderer([tmp_path])
    with pytest.raises(PromptError, match=r"template `bad.j2`: 'hint' is undefined"):
        renderer.render("bad.j2", _context([]))
    with pytest.raises(PromptError, match=r"template `nope\.j2` not found"):
        renderer.render("nope.j2", _context([]))
    assert set(_context([])) == CONTEXT_VARIABLES


def test_prompt_sandbox_blocks_unsafe_access(tmp_path: Path) -> None:
    (tmp_path / "evil.j2").write_text("{{ task.__class__.__mro__ }}")
    with pytest.raises(PromptError):
        PromptRenderer([tmp_path]).render("evil.j2", _context([]))


def test_prompt_renderer_reads_each_template_once_per_run(tmp_path: Path) -> None:
    """Templates are compiled on first use and kept: a run renders thousands of prompts."""
    (tmp_path / "t.j2").write_text("Q: {{ task.question }}")
    renderer = PromptRenderer([tmp_path])
    assert renderer.render("t.j2", {"task": {"question": "1+1"}}) == "Q: 1+1"
    (tmp_path / "t.j2").write_text("changed {{ task.question }}")
    assert renderer.render("t.j2", {"task": {"question": "2+2"}}) == "Q: 2+2"


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_picked_logprobs_chunked_equal_log_softmax_with_gradients(monkeypatch, temperature):
    from srpo_dsl.backends.logprobs import PickedLogprobs, picked_logprobs

    monkeypatch.setattr(PickedLogprobs, "CHUNK_BYTES", 4 * 11 * 3)  # 3 rows per chunk: 5 uneven chunks
    torch.manual_seed(0)
    logits = torch.randn(2, 7, 11, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, 11, (2, 7))
    weights = torch.randn(2, 7)
    got = picked_logprobs(logits, targets, temperature)
    (got * weights).sum().backward()
    grad, logits.grad = logits.grad.clone(), None
    t = temperature if temperature > 0 else 1.0
    want = torch.log_softmax(logits.float() / t, -1).gather(-1, targets[..., None]).squeeze(-1)
    (want * weights).sum().backward()
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-6)
    assert grad.dtype == torch.bfloat16 and torch.allclose(
        grad.float(), logits.grad.float(), atol=1e-2, rtol=1e-2
    )
    exact = torch.nn.functional.one_hot(targets, 11) - torch.softmax(logits.detach().float() / t, -1)
    assert torch.allclose(grad.float(), (exact * weights[..., None] / t).bfloat16().float())
