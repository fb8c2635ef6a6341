"""The per-GPU lower bound on training memory (rl/engines/fit.py) against hand-computed bytes, and its message."""

from __future__ import annotations

import pytest

from srpo_dsl.registries import ROLLOUT_ENGINES
from srpo_dsl.rl.engines.fit import MemoryLayout, fit_problem, training_bytes

B = 10**9  # parameters


@pytest.mark.parametrize(
    ("zero", "world", "offload", "backend", "expected"),
    [
        (0, 1, "none", "hf", 2 + 2 + 12),  # weights, gradients, fp32 master + Adam moments
        (1, 4, "none", "hf", 2 + 2 + 12 / 4),  # optimizer state split
        (2, 4, "none", "hf", 2 + (2 + 12) / 4),  # and gradients
        (3, 4, "none", "hf", (2 + 2 + 12) / 4 + 2),  # and weights; the hf engine's full copy on top
        (3, 4, "none", "vllm", (2 + 2 + 12) / 4),  # vllm holds its own copy (its memory share aside)
        (2, 1, "optimizer", "hf", 2 + 2),  # optimizer state on the CPU
        (3, 2, "all", "vllm", 2 / 2),  # parameters and optimizer on the CPU: the gradient shard stays
    ],
)
def test_training_bytes_by_stage(zero, world, offload, backend, expected):
    assert training_bytes(
        B, B, MemoryLayout(zero, world, offload, ROLLOUT_ENGINES[backend])
    ) == pytest.approx(expected * B)


def test_frozen_base_with_adapters_counts_weights_only():
    # a base hosting adapters is in an engine but trains (almost) nothing: its weights alone
    assert training_bytes(B, 0, MemoryLayout(2, 8, "none", ROLLOUT_ENGINES["hf"])) == 2 * B


def test_fit_problem_names_the_stage_and_the_largest_policy():
    layout = MemoryLayout(0, 1, "none", ROLLOUT_ENGINES["hf"])
    needed = {"solver": 16.0 * 2**30, "judge": 4.0 * 2**30}
    assert fit_problem(needed, 20.0 * 2**30, layout) is None
    message = fit_problem(needed, 19.5 * 2**30, layout)
    assert message.startswith("the policies' weights, gradients and optimizer states need at least 20.0 GiB")
    assert (
        "ZeRO-0 on 1 GPU(s) (`solver` alone 16.0 GiB), more than the 19.5 GiB of the GPU left for training: "
        "use --zero 3" in message
    )
    assert "\n" not in message


TEAM = """workflow fit
policy solver = hf("model-a")
policy judge = hf("model-a") frozen
policy tuned = hf("model-a") lora(r = 4, alpha = 8)
policy base = hf("model-a") frozen
policy one = adapter(base, r = 4, alpha = 8)
task arith(n = 8)
agent s uses solver prompt "p.j2" emits text
agent j uses judge prompt "p.j2" emits text
agent t uses tuned prompt "p.j2" emits text
agent o uses one prompt "p.j2" emits text
parallel s
aggregate j
aggregate t
aggregate o
reward f1(o, task.answer)
"""


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_needed_bytes_per_kind_of_policy(tmp_path, backend):
    """Full, frozen, lora(...) and a base hosting adapters, read from the compiled workflow and the
    model's config (no weights loaded)."""

    from srpo_dsl.rl.engines.fit import needed_bytes, parameter_count
    from srpo_dsl.runtime.setup import load_workflow
    from tests.support.training import make_models

    model = make_models(tmp_path)[0]
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "team.srpo").write_text(TEAM)
    graph = load_workflow(tmp_path / "team.srpo").graph
    n = parameter_count(str(model))
    assert n == sum(
        p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(model).parameters()
    )
    layout = MemoryLayout(0, 1, "none", ROLLOUT_ENGINES[backend])
    needed = needed_bytes(graph, dict.fromkeys(graph.policies, str(model)), layout)
    assert needed == {
        "solver": 16 * n,  # trained in full
        "judge": 2 * n if backend == "hf" else 0,  # frozen: its weights (under vllm, in vLLM's share)
        "tuned": 2 * n,  # lora(...): the base's weights; the LoRA state is left out
        "base": 2 * n,  # hosts adapter `one`, counted once here
    }


@pytest.mark.parametrize(("zero", "world", "backend"), [(0, 1, "hf"), (3, 4, "hf"), (3, 4, "vllm")])
def test_kl_adds_a_reference_copy_per_trained_model(tmp_path, zero, world, backend):
    """kl > 0: each model trained in full or with lora(...) keeps its initial weights, 2 bytes per parameter
    unsplit at every stage; a base hosting adapters scores the reference itself (no copy); frozen: none."""
    from srpo_dsl.rl.engines.fit import needed_bytes, parameter_count
    from srpo_dsl.runtime.setup import load_workflow
    from tests.support.training import make_models

    model = make_models(tmp_path)[0]
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "team.srpo").write_text(TEAM)
    graph = load_workflow(tmp_path / "team.srpo").graph
    paths, n = dict.fromkeys(graph.policies, str(model)), parameter_count(str(model))
    without = needed_bytes(graph, paths, MemoryLayout(zero, world, "none", ROLLOUT_ENGINES[backend]))
    with_kl = needed_bytes(
        graph, paths, MemoryLayout(zero, world, "none", ROLLOUT_ENGINES[backend], reference=True)
    )
    assert {name: with_kl[name] - without[name] for name in with_kl} == {
        "solver": 2 * n,
        "judge": 0,
        "tuned": 2 * n,
        "base": 0,
    }
    if (zero, backend) == (3, "hf"):  # by hand: 16 bytes split over 4 ranks, the rollout copy, the reference
        assert with_kl["solver"] == pytest.approx(16 * n / 4 + 2 * n + 2 * n)


def test_a_kl_reference_that_does_not_fit_is_named():
    """One 1e9-parameter model trained in full on one GPU of 16 GiB: 16e9 bytes (14.9 GiB) fit, 18e9 with
    the reference (16.8 GiB) do not."""
    layout, with_kl = (
        MemoryLayout(0, 1, "none", ROLLOUT_ENGINES["hf"]),
        MemoryLayout(0, 1, "none", ROLLOUT_ENGINES["hf"], reference=True),
    )
    assert fit_problem({"solver": training_bytes(B, B, layout)}, 16 * 2**30, layout) is None
    needed = {"solver": training_bytes(B, B, with_kl) + 2 * B}
    message = fit_problem(needed, 16 * 2**30, with_kl)
    assert message.startswith(
        "the policies' weights, gradients, optimizer states and KL reference copies need at least 16.8 GiB"
    )


def test_the_trainer_checks_memory_with_the_reference_when_kl_is_on(tmp_path, monkeypatch):
    """The layout the trainer checks before loading anything says whether kl > 0 (the check itself only runs
    on CUDA: replaced here by one that records the layout and refuses)."""
    from srpo_dsl.rl.engines import fit
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import TrainError, train
    from tests.support.training import make_models, write_team

    seen = []
    monkeypatch.setattr(
        fit, "check_fit", lambda graph, paths, layout, device: seen.append(layout) or "no room"
    )
    models = make_models(tmp_path / "models")
    workflow = write_team(tmp_path / "wf")
    for kl in (0.0, 0.1):
        with pytest.raises(TrainError, match="no room"):
            train(
                plan_file(
                    workflow,
                    tmp_path / f"run-{kl}",
                    {"kl": kl},
                    models={"a": str(models[0]), "b": str(models[1])},
                )
            )
    assert [layout.reference for layout in seen] == [False, True]
    assert not (tmp_path / "run-0.1").exists()


def test_a_token_budget_counts_the_activations_of_a_micro_batch(tmp_path):
    """By hand from the model's config: per token 34 bytes x hidden x layers (with checkpointing: 2 x hidden
    x layers + one layer's 34 x hidden) times the budget, plus the chunked head's one chunk (3 x 256 MiB: a
    Llama's head is applied a chunk of tokens at a time), or without it 4 bytes per vocabulary entry per
    token; once, for the trained model that costs most. No budget: no activations line."""
    from transformers import AutoConfig

    from srpo_dsl.rl.engines.fit import ACTIVATIONS, ModelShape, needed_bytes
    from srpo_dsl.runtime.setup import load_workflow
    from tests.support.training import make_models

    model = make_models(tmp_path)[0]
    config = AutoConfig.from_pretrained(model)
    h, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "team.srpo").write_text(TEAM)
    graph = load_workflow(tmp_path / "team.srpo").graph
    paths = dict.fromkeys(graph.policies, str(model))
    hf = ROLLOUT_ENGINES["hf"]
    assert ACTIVATIONS not in needed_bytes(graph, paths, MemoryLayout(0, 1, "none", hf))
    full = needed_bytes(graph, paths, MemoryLayout(0, 1, "none", hf, tokens=4096))
    assert config.model_type == "llama"
    assert full[ACTIVATIONS] == 4096 * 34 * h * layers + 3 * 2**28
    saved = needed_bytes(graph, paths, MemoryLayout(0, 1, "none", hf, tokens=4096, checkpointing=True))
    assert saved[ACTIVATIONS] == 4096 * (2 * h * layers + 34 * h) + 3 * 2**28
    whole = ModelShape(h, layers, vocab, chunked_head=False)  # a head that keeps its logits (Gemma 2, say)
    assert whole.activation_bytes(4096, False) == 4096 * (34 * h * layers + 4 * vocab)
    problem = fit_problem(full, 1.0, MemoryLayout(0, 1, "none", hf, tokens=4096))
    assert "the activations of a micro-batch" in problem and "a smaller max_tokens_per_micro_batch" in problem


def test_the_decode_caches_get_half_of_what_the_training_state_leaves():
    """80 GiB, 30 GiB needed by the training state: the kept decode caches may take 25 GiB; none when the
    state needs it all."""
    from srpo_dsl.rl.engines.fit import cache_cap

    gib = 2**30
    assert cache_cap({"solver": 20 * gib, "micro-batch activations": 10 * gib}, 80 * gib) == 25 * gib
    assert cache_cap({"solver": 90 * gib}, 80 * gib) == 0.0
