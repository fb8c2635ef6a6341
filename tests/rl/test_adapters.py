"""LoRA adapters on one frozen base: each adapter updates exactly as it would alone, in any ZeRO stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.adapters import LORA_A, LORA_B, WORKFLOW, graph_of, seeded_lora, shared
from tests.support.training import (  # noqa: F401  (`one_thread`: the autouse fixture, one torch thread)
    SGD,
    TEMPERATURES,
    assert_close,
    make_episodes,
    make_models,
    one_thread,
    policy_spec,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return make_models(tmp_path_factory.mktemp("models"))[0]


def lora_state(module, adapter: str) -> dict:
    """{name with the adapter's name as `default`: value} of one adapter's LoRA weights (gathered)."""
    from srpo_dsl.rl.engines.weight_sync import full_state

    with full_state(module) as state:
        return {
            k.replace(f".{adapter}.", ".default."): v.clone() for k, v in state.items() if f".{adapter}." in k
        }


def separate(base: Path, dist, **options):
    """Two models, each the base with one LoRA of its own (its own engine, its own clipping)."""
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.engines.ds_engine import ds_config
    from srpo_dsl.rl.engines.policies import build_policy

    opts = TrainOptions(**options)
    config = ds_config(opts, device="cpu", world_size=1, user=SGD)
    specs = {"a": LORA_A, "b": LORA_B}
    policies = {
        n: build_policy(n, str(base), policy_spec(True, lora), opts, dist, config)
        for n, lora in specs.items()
    }
    seeded_lora(policies["a"].module, ".default.", 1)
    seeded_lora(policies["b"].module, ".default.", 2)
    return policies, opts


@pytest.mark.slow
@pytest.mark.parametrize("objective, clip", [("srpo", 0.05), ("traj", 0.04)])  # traj's gradient is smaller
def test_each_adapter_updates_exactly_as_it_would_alone(base, dist, tmp_path, objective, clip):
    """Events (traj: episodes) mix adapters a and b; clipping binds; the shared engine equals two separate
    LoRA models."""
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), objective)
    options = {"old_logprobs": "rollout", "grad_clip": clip, "micro_batches": 2, "objective": objective}
    one, opts = shared(base, tmp_path, dist, **options)
    two, _ = separate(base, dist, **options)
    module = one["a"].module
    before = lora_state(module, "adapter_a")
    assert_close(before, lora_state(two["a"].module, "default"), atol=0)
    assert_close(lora_state(module, "adapter_b"), lora_state(two["b"].module, "default"), atol=0)
    got, want = update(one, rows, opts, dist, TEMPERATURES), update(two, rows, opts, dist, TEMPERATURES)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5) and got["grad_norm"] > 4 * clip
    assert_close(lora_state(module, "adapter_a"), lora_state(two["a"].module, "default"))
    assert_close(lora_state(module, "adapter_b"), lora_state(two["b"].module, "default"))
    moved = max((lora_state(module, "adapter_a")[k] - before[k]).abs().max().item() for k in before)
    assert 1e-3 < moved <= clip + 1e-6  # a real, clipped SGD step (lr 1)
    frozen = {k: v for k, v in module.state_dict().items() if ".lora_" not in k}
    reference = {k: v for k, v in two["a"].module.state_dict().items() if ".lora_" not in k}
    assert_close(frozen, reference, atol=0)  # the base never moves


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_adapters_step_alike_in_every_zero_stage(base, dist, tmp_path, stage):
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), "srpo")
    out = {}
    for zero in (0, stage):
        policies, opts = shared(base, tmp_path, dist, zero=zero, micro_batches=2, grad_clip=0.05)
        stats = update(policies, rows, opts, dist, TEMPERATURES)
        out[zero] = {n: lora_state(policies["a"].module, f"adapter_{n}") for n in "ab"}, stats
    for n in "ab":
        assert_close(out[0][0][n], out[stage][0][n])
    assert out[0][1]["grad_norm"] == pytest.approx(out[stage][1]["grad_norm"], rel=1e-4)


def test_one_generate_call_mixes_adapters_as_separate_calls_would(base, dist, tmp_path):
    """Greedy decoding: a batch mixing adapters gives each row what a call with its adapter alone gives."""
    import torch

    from srpo_dsl.backends.base import GenRequest
    from srpo_dsl.backends.decoding import make_decoder

    policies, _ = shared(base, tmp_path, dist)
    backend = policies["a"].backend
    assert backend is policies["b"].backend is policies["base"].backend
    prompts = ["S 17+25=", "A 3+4=", "S 1+1="]
    requests = [
        GenRequest(p, 6, 0.0, 1.0, adapter=a) for a in ("adapter_a", "adapter_b", "__base__") for p in prompts
    ]
    mixed = backend.generate(requests, seed=0)
    alone = [
        r
        for a in ("adapter_a", "adapter_b", "__base__")
        for r in backend.generate([q for q in requests if q.adapter == a], seed=0)
    ]
    assert [r.response_token_ids for r in mixed] == [r.response_token_ids for r in alone]
    for x, y in zip(mixed, alone):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)
    by_adapter = [tuple(tuple(r.response_token_ids) for r in mixed[i : i + 3]) for i in (0, 3, 6)]
    assert len(set(by_adapter)) == 3  # the adapters really differ
    backend.decoder = make_decoder("static", backend.model, backend.pad_id, backend.eos_ids)
    static = backend.generate(requests, seed=0)  # a fixed-shape batch routed through the adapters
    assert [r.response_token_ids for r in static] == [r.response_token_ids for r in mixed]
    for x, y in zip(static, mixed):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)


DSL_CASES = [
    ("adapter(base, r = 4", "adapter(bsae, r = 4", "E015", 3, "adapter `a` is on an undefined policy `bsae`"),
    (
        'hf("{base}") frozen',
        'hf("{base}")',
        "E016",
        3,
        "must be a frozen model without LoRA; it is trainable",
    ),
    ('hf("{base}") frozen', 'hf("{base}") frozen lora(r = 2)', "E016", 3, "it has lora"),
    ("policy b = adapter(base,", "policy b = adapter(a,", "E016", 4, "the base `a` of adapter `b`"),
    ("alpha = 8)", "alpha = 8) frozen", "E017", 3, "adapter `a` cannot be `frozen`"),
    ("alpha = 8)", "alpha = 8) lora(r = 2)", "E017", 3, "adapter `a` cannot be `lora(...)`"),
    ("r = 4, alpha = 8", "r = 0, alpha = 8", "E024", 3, "`r` must be greater than or equal to 1"),
    ("r = 4, alpha = 8", "rank = 4, alpha = 8", "E023", 3, "unknown option `rank`"),
]


@pytest.mark.parametrize("old,new,code,line,message", DSL_CASES, ids=[c[2] + "-" + c[1] for c in DSL_CASES])
def test_adapter_declarations_are_checked(tmp_path, old, new, code, line, message):
    from srpo_dsl.lang import analyze

    (tmp_path / "p.j2").write_text("{{ task.question }}")
    text = WORKFLOW.replace(old, new, 1).format(base="m")
    assert text != WORKFLOW.format(base="m")
    found = [(d.code, d.span.line, d.message) for d in analyze(text, "w.srpo", [tmp_path]).diagnostics]
    assert any(c == code and n == line and message in m for c, n, m in found), found


def test_the_graph_names_each_policys_adapter(base, tmp_path):
    graph = graph_of(base, tmp_path)
    assert graph.policies["a"].base == "base" and graph.policies["a"].model == str(base)
    assert dict(graph.adapters) == {"a": "adapter_a", "b": "adapter_b", "base": "__base__"}
    assert graph.adapters_on("base") == {
        "adapter_a": LORA_A,
        "adapter_b": {**LORA_B, "targets": "q_proj,v_proj"},
    }


def test_compile_reports_roles_and_parameter_counts(base, tmp_path):
    from tests.support.clitools import cli

    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "w.srpo").write_text(WORKFLOW.format(base=base))
    r = cli("compile", tmp_path / "w.srpo", "-o", tmp_path / "g.mmd")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("adapter ")]
    # hidden 32, intermediate 64, 1 layer, 4 heads of 8, 2 kv heads: q, o 32x32; k, v 32x16; gate, up 32->64; down 64->32
    all_linear = 4 * ((32 + 32) * 2 + (32 + 16) * 2 + (32 + 64) * 2 + (64 + 32))
    qv = 2 * ((32 + 32) + (32 + 16))
    assert lines == [
        f"adapter a on base (r 4, alpha 8, all-linear): roles solver; {all_linear:,} trainable parameters",
        f"adapter b on base (r 2, alpha 2, q_proj,v_proj): roles aggregator; {qv:,} trainable parameters",
    ]


@pytest.mark.slow
def test_kl_reference_of_an_adapter_is_its_base(base, dist, tmp_path):
    """No second model: the reference is the shared base without adapters. Fresh adapters are the identity
    (LoRA B = 0), so the first update's KL term is 0; once they move, it is not."""
    import torch

    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.engines.ds_engine import ds_config
    from srpo_dsl.rl.engines.policies import build_policies
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    rows = build_rows(make_episodes(mixed=True), "srpo")
    graph = graph_of(base, tmp_path)
    losses = {}
    for kl in (0.0, 0.5):
        opts = TrainOptions(kl=kl, lr=0.5)
        config = ds_config(opts, device="cpu", world_size=1, user=SGD)
        torch.manual_seed(0)  # the same LoRA A weights in both runs
        policies = build_policies(graph, {n: str(base) for n in graph.policies}, opts, dist, config)
        assert (policies["a"].reference is None) == (kl == 0)
        losses[kl] = [update(policies, rows, opts, dist, TEMPERATURES)["loss"] for _ in range(2)]
    assert losses[0.5][0] == pytest.approx(losses[0.0][0], abs=1e-7)
    assert losses[0.5][1] > losses[0.0][1] + 1e-6


def test_block_routing_equals_peft_routing_in_any_row_order(base):
    """Rows through their adapters by blocks (ours) or by peft's index lists: the same logits, interleaved or not."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from srpo_dsl.rl.engines.adapters import lora_config, with_adapters

    ours = with_adapters(AutoModelForCausalLM.from_pretrained(base), {"x": LORA_A, "y": LORA_B}).eval()
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base), lora_config(LORA_A), adapter_name="x"
    )
    peft_model.add_adapter("y", lora_config(LORA_B))
    peft_model.eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for (name, p), (other, q) in zip(ours.named_parameters(), peft_model.named_parameters()):
            assert name == other
            if ".lora_" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
                q.copy_(p)
    ids = torch.randint(3, 200, (6, 5), generator=generator)
    orders = (["x", "x", "y", "y", "__base__", "__base__"], ["y", "x", "__base__", "x", "y", "x"])
    for names in orders:
        with torch.no_grad():  # the in-place blocks (and generation's stacked deltas)
            got = ours(input_ids=ids, adapter_names=names).logits
            want = peft_model(input_ids=ids, adapter_names=names).logits
        assert torch.allclose(got, want, atol=1e-5)
    peft_model.requires_grad_(True)
    for names in orders:  # with grad: the blocks' deltas concatenated over the rows, base rows zero
        weights = torch.randn(6, 5, ours.config.vocab_size, generator=generator)
        grads, outputs = [], []
        for model in (ours, peft_model):
            model.zero_grad()
            outputs.append(model(input_ids=ids, adapter_names=names).logits)
            (weights * outputs[-1]).sum().backward()
            grads.append({n: p.grad for n, p in model.named_parameters() if ".lora_" in n})
        assert torch.allclose(outputs[0], outputs[1], atol=1e-5)
        assert grads[0].keys() == grads[1].keys()
        for name, grad in grads[0].items():
            assert torch.allclose(grad, grads[1][name], atol=1e-5), name


def test_a_policy_with_its_own_lora_generates_through_it(base, dist):
    """Generation and training see the same model: the log-probs a `lora(...)` policy reports while
    sampling equal the trainer's recomputed ones (they would not if generation skipped the LoRA)."""
    import torch

    from srpo_dsl.backends.base import GenRequest
    from srpo_dsl.backends.logprobs import response_logprobs

    policies, _ = separate(base, dist)
    policy = policies["a"]
    results = policy.backend.generate([GenRequest(f"S {i}+{i}=", 6, 1.0) for i in range(4)], seed=0)
    with torch.no_grad():
        recomputed, _ = response_logprobs(
            policy.module,
            [r.prompt_token_ids for r in results],
            [r.response_token_ids for r in results],
            policy.pad_id,
            1.0,
            torch.device("cpu"),
        )
    for r, row in zip(results, recomputed):
        assert torch.allclose(torch.tensor(r.logprobs), row[: len(r.logprobs)], atol=1e-5)


def test_stacked_delta_equals_each_adapter_on_its_rows():
    """All adapters in two matmuls (generation), against each adapter's rows through its own A and B
    (ranks 2 and 4, scalings 0.5 and 2, a row of the base alone that gets an exact zero)."""
    import types

    import torch

    from srpo_dsl.rl.engines.adapters import _stacked_delta

    torch.manual_seed(0)
    x = torch.randn(5, 3, 6, dtype=torch.float64)

    def linear(w: torch.Tensor) -> torch.nn.Linear:  # a vanilla LoRA A or B
        module = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
        module.weight.data.copy_(w)
        return module

    a = {"p": torch.randn(2, 6, dtype=torch.float64), "q": torch.randn(4, 6, dtype=torch.float64)}
    b = {"p": torch.randn(7, 2, dtype=torch.float64), "q": torch.randn(7, 4, dtype=torch.float64)}
    layer = types.SimpleNamespace(
        lora_A={n: linear(w) for n, w in a.items()},
        lora_B={n: linear(w) for n, w in b.items()},
        scaling={"p": 0.5, "q": 2.0},
        _cast_input_dtype=lambda t, dtype: t.to(dtype),
    )
    got = _stacked_delta(layer, x, [("p", 0, 2), ("q", 3, 5)])  # row 2: the base alone
    zero = torch.zeros(1, 3, 7, dtype=torch.float64)
    want = torch.cat([x[0:2] @ a["p"].T @ b["p"].T * 0.5, zero, x[3:5] @ a["q"].T @ b["q"].T * 2.0])
    assert torch.equal(got[2], zero[0]) and torch.allclose(got, want, atol=1e-12)
