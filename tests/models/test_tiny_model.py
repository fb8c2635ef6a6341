"""The embedded model `builtin:tiny`: shipped as package data, found without a build, loads with
`from_pretrained`, gives the documented held-out figures; its build is deterministic."""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import srpo_dsl
from srpo_dsl.backends import GenRequest
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.envs.arith import make_arith_tasks
from srpo_dsl.models import episodes, tiny
from srpo_dsl.models.build_tiny import differing_files, largest_weight_difference
from srpo_dsl.models.evaluation import evaluate_team, evaluate_tools
from srpo_dsl.models.specs import resolve_model_spec
from srpo_dsl.models.tiny import (
    RECIPE,
    SHIPPED,
    TINY_NAME,
    Recipe,
    build_tiny_model,
    ensure_tiny_model,
    warmup_report,
)
from srpo_dsl.models.transcripts import team_episode, tool_episode
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.prompts import PromptRenderer
from srpo_dsl.runtime.setup import build_tools, load_workflow

# The held-out figures README.md and docs/benchmarks.md give (256 questions, seed 0).
DOCUMENTED_SAMPLED, DOCUMENTED_GREEDY = 0.41015625, 0.91796875  # 41.0% and 91.8%


def test_builtin_tiny_is_the_shipped_folder_and_nothing_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_path: Path
) -> None:
    monkeypatch.setenv("SRPO_DSL_CACHE", str(tmp_path))
    assert resolve_model_spec("builtin:tiny") == str(SHIPPED) == str(tiny_model_path)
    assert SHIPPED.parent == Path(srpo_dsl.__file__).parent / "models"  # inside the wheel's package
    assert list(tmp_path.iterdir()) == []
    size = sum(f.stat().st_size for f in SHIPPED.iterdir())
    assert 1_000_000 < size < 2_000_000


def test_shipped_weights_load_and_give_the_documented_heldout_figures() -> None:
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    model = AutoModelForCausalLM.from_pretrained(SHIPPED)
    backend = HFBackend(model, tokenizer=tokenizer)
    questions = make_arith_tasks(RECIPE.eval_questions, 0, heldout=True)
    greedy = evaluate_team(backend, questions, temperature=0.0)
    sampled = evaluate_team(backend, questions, temperature=1.0)
    report = warmup_report(SHIPPED)
    assert (report.sampled_team_accuracy, report.greedy_team_accuracy) == (
        DOCUMENTED_SAMPLED,
        DOCUMENTED_GREEDY,
    )
    assert report.parameters == sum(p.numel() for p in model.parameters())
    one = 1 / RECIPE.eval_questions  # another thread count may flip a near-tie sample
    assert greedy.team == pytest.approx(report.greedy_team_accuracy, abs=one)
    assert greedy.solver == pytest.approx(report.greedy_solver_accuracy, abs=one)
    assert sampled.team == pytest.approx(report.sampled_team_accuracy, abs=3 * one)
    assert sampled.verifier == pytest.approx(report.sampled_verifier_accuracy, abs=3 * one)
    graded = make_arith_tasks(RECIPE.eval_questions, 0, heldout=True, mix="graded")
    tools = evaluate_tools(backend, graded, temperature=0.0)
    assert tools.accuracy == pytest.approx(report.greedy_tool_accuracy, abs=one)
    assert tools.call_rate == pytest.approx(report.greedy_tool_call_rate, abs=one)


def test_tokenizer_round_trips_the_role_contracts() -> None:
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED)
    for text in ["\\boxed{42}", "<verify>approve</verify>", "FINAL: \\boxed{137}", "<calc>47*86</calc>"]:
        assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    assert len(tokenizer("\\boxed{", add_special_tokens=False)["input_ids"]) == 1


def test_the_warm_model_answers_and_leaves_room_for_rl() -> None:
    report = warmup_report(SHIPPED)
    assert 0.2 <= report.sampled_team_accuracy <= 0.6 < report.greedy_team_accuracy
    [out] = HFBackend(SHIPPED).generate([GenRequest("S 17+25=", 12, 0.0)])
    assert out.finish_reason == "eos" and out.text.startswith("\\boxed{")


def test_the_cache_serves_when_the_package_data_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tiny, "SHIPPED", tmp_path / "absent")
    cached = tmp_path / "cache" / TINY_NAME
    shutil.copytree(SHIPPED, cached)
    assert ensure_tiny_model(tmp_path / "cache", progress=False) == cached


def test_the_build_is_deterministic(tmp_path: Path) -> None:
    small = Recipe(16, 1, 32, episodes=48, tool_episodes=48, steps=4, batch=8, eval_questions=4)
    first = build_tiny_model(tmp_path / "a", recipe=small, progress=False)
    again = build_tiny_model(tmp_path / "b", recipe=small, progress=False)
    build_tiny_model(tmp_path / "c", recipe=small, progress=False, seed=1)
    assert first == again and differing_files(tmp_path / "a", tmp_path / "b") == []
    assert "model.safetensors" in differing_files(tmp_path / "a", tmp_path / "c")
    assert all(oct(f.stat().st_mode)[-3:] == "644" for f in (tmp_path / "a").iterdir())


def test_the_check_names_what_differs(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    save_file({"w": torch.tensor([1.0, 2.0]), "v": torch.zeros(3)}, a / "model.safetensors")
    save_file({"w": torch.tensor([1.0, 2.5]), "v": torch.zeros(3)}, b / "model.safetensors")
    (a / "config.json").write_text("{}")
    (b / "config.json").write_text("{}")
    (a / "extra.txt").write_text("x")
    (a / "generation_config.json").write_text('{"pad_token_id": 0, "transformers_version": "5.23.0"}')
    (b / "generation_config.json").write_text('{"transformers_version": "5.24.0", "pad_token_id": 0}')
    assert differing_files(a, b) == ["extra.txt", "model.safetensors"]  # the writing version aside
    (b / "config.json").write_text('{"vocab_size": 313}')
    assert differing_files(a, b) == ["config.json", "extra.txt", "model.safetensors"]
    assert largest_weight_difference(a / "model.safetensors", b / "model.safetensors") == 0.5
    save_file({"w": torch.zeros(3)}, b / "model.safetensors")
    assert largest_weight_difference(a / "model.safetensors", b / "model.safetensors") == float("inf")


def test_team_prompts_are_rendered_from_the_executors_episode_context(tmp_path: Path) -> None:
    """Every name of the executor's context is there (strict rendering: a missing one is an error), with
    the memory an executed episode has at each step: outputs accepted so far, the verdict as feedback."""
    (tmp_path / "quickstart").mkdir()
    probe = (
        "{{ step }}|{{ memory.accepted | map(attribute='text') | join(',') }}|{{ feedback | join(',') }}"
        "|{{ observations | length }}{{ memory.observations | length }}|{{ pool_size }}"
    )
    for template in episodes.TEMPLATES.values():
        (tmp_path / template).write_text(probe)
    [task] = make_arith_tasks(1, 0)
    (solver, one), (again, two), (verifier, verdict), (aggregator, _) = team_episode(
        random.Random(0), task, PromptRenderer([tmp_path])
    )
    assert solver == again == "1|||00|2"
    assert verifier == f"2|{one},{two}||00|1"
    assert aggregator == f"3|{one},{two},{verdict}|{verdict}|00|1"


class _Recorder:
    """The scripted backend, recording the prompts it is sent (its byte tokens need no length cap)."""

    def __init__(self, replies: list[str]):
        self.inner = ScriptedBackend({"solver": replies})
        self.name, self.version, self.prompts = "scripted", 0, []

    def generate(self, requests, *, seed=None):
        self.prompts += [r.prompt for r in requests]
        return self.inner.generate([replace(r, max_tokens=64) for r in requests], seed=seed)


def test_tool_transcripts_are_what_the_executor_sends_and_parses() -> None:
    """Replayed through the executor on workflows/quickstart_tools.srpo, each synthetic episode's
    responses get exactly its prompts (calculator results included), are parsed to the same validity,
    and take as many turns; among them calls, malformed outputs and forced last turns."""
    workflow = load_workflow(Path(__file__).resolve().parents[2] / "workflows" / "quickstart_tools.srpo")
    renderer, rng, tools = PromptRenderer([episodes.templates_dir()]), random.Random(0), build_tools(workflow)
    tasks = make_arith_tasks(300, 0, mix="graded")
    seen = {"calc": 0, "invalid": 0, "forced": 0}
    for task in tasks:
        rows = tool_episode(rng, task, renderer)
        backend = _Recorder([text for _, text in rows])
        [ep] = Executor(workflow.graph, {"lm": backend}, workflow.renderer(), tools).run([task])
        assert backend.prompts == [prompt for prompt, _ in rows]
        members = [m for e in ep.events for m in e.members]
        assert [m.text for m in members] == [text for _, text in rows]
        run = episodes.ToolRun(episodes.start(task))
        for prompt, text in rows:
            assert run.prompt(renderer) == prompt
            run.commit(text)
        assert run.answer == ep.answer and run.ep.history == ep.history
        seen["calc"] += ep.tool_calls > 0
        seen["invalid"] += ep.invalid_actions > 0
        seen["forced"] += len(members) == episodes.TOOL_TURNS + 1
    assert all(seen.values()), seen
