"""Backends (hf, scripted, vllm guard), prompt rendering and the embedded tiny model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from srpo_dsl.backends import BackendError, GenRequest, make_backend, resolve_model_spec
from srpo_dsl.backends.hf import HFBackend, encode_prompts, pack_sequences, sequence_logprobs, token_logprobs
from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.runtime.prompts import CONTEXT_VARIABLES, PromptError, PromptRenderer

WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"
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
        if res.finish_reason == "stop":
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


def test_hf_wraps_an_in_memory_model_and_syncs_weights(tiny_random_model: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_random_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model)
    with pytest.raises(BackendError, match="needs its tokenizer"):
        HFBackend(model)
    shared = HFBackend(model, tokenizer=tokenizer)
    assert shared.model is model and shared.version == 0
    model.train()
    shared.generate([GenRequest("hello", 2)])
    assert model.training  # generation leaves the trainer's mode alone
    assert shared.sync_weights() == 1
    zeros = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    assert shared.sync_weights(zeros) == 2
    assert all((p == 0).all() for p in model.parameters())


def test_hf_load_error_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="cannot load model") as err:
        HFBackend(tmp_path / "missing")
    assert "\n" not in str(err.value)


# --- scripted ------------------------------------------------------------------------------


def test_scripted_cycles_per_role(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({"solver": ["\\boxed{1}", "\\boxed{2}"], "*": ["ok"]}))
    backend = make_backend("scripted", str(script))
    reqs = [GenRequest("p", 20, role=r) for r in ["solver", "verifier", "solver", "solver", "judge"]]
    out = backend.generate(reqs)
    assert [r.text for r in out] == ["\\boxed{1}", "ok", "\\boxed{2}", "\\boxed{1}", "ok"]
    assert out[0].response_token_ids == list(b"\\boxed{1}") and out[0].logprobs == [0.0] * 9
    assert out[0].prompt_token_ids == [ord("p")] and out[0].finish_reason == "stop"
    [cut] = backend.generate([GenRequest("p", 3, role="verifier")])
    assert cut.text == "ok" and cut.finish_reason == "stop"
    [cut] = backend.generate([GenRequest("p", 4, role="solver")])
    assert cut.text == "\\box" and cut.finish_reason == "length"


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
    assert isinstance(make_backend("hf", f"hf:{tiny_random_model}"), HFBackend)
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
        "memory": {"accepted": [], "feedback": [], "documents": []},
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


# --- the embedded tiny model -----------------------------------------------------------------


@pytest.mark.slow
def test_tiny_model_loads_and_round_trips(tiny_model_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    AutoModelForCausalLM.from_pretrained(tiny_model_path)
    for text in ["\\boxed{42}", "<verify>approve</verify>", "FINAL: \\boxed{137}"]:
        assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    assert len(tokenizer("\\boxed{", add_special_tokens=False)["input_ids"]) == 1


@pytest.mark.slow
def test_tiny_model_answers_and_leaves_room_for_rl(tiny_model_path: Path) -> None:
    from srpo_dsl.models.tiny import warmup_report

    report = warmup_report(tiny_model_path)
    assert 0.2 <= report.sampled_team_accuracy <= 0.6 < report.greedy_team_accuracy
    [out] = HFBackend(tiny_model_path).generate([GenRequest("S 17+25=", 12, 0.0)])
    assert out.finish_reason == "stop" and out.text.startswith("\\boxed{")


@pytest.mark.slow
def test_builtin_tiny_resolves_from_the_cache(tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SRPO_DSL_CACHE", str(tiny_model_path.parent))
    assert resolve_model_spec("builtin:tiny") == str(tiny_model_path)
