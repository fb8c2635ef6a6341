"""Two LoRA adapters on one frozen base: their options (`LORA_A`, `LORA_B`), the team declaring them, and
one engine holding both with their weights made non-zero (`shared`)."""

from __future__ import annotations

from pathlib import Path

from tests.support.training import SGD

LORA_A = {"r": 4, "alpha": 8, "dropout": 0.0, "targets": "all-linear"}
LORA_B = {"r": 2, "alpha": 2, "dropout": 0.0, "targets": ["q_proj", "v_proj"]}
WORKFLOW = """workflow team
policy base = hf("{base}") frozen
policy a = adapter(base, r = 4, alpha = 8)
policy b = adapter(base, r = 2, alpha = 2, targets = "q_proj,v_proj")
task arith()
agent solver[2] uses a prompt "p.j2" emits text
agent aggregator uses b prompt "p.j2" emits text
parallel solver
aggregate aggregator
reward f1(aggregator, task.answer)
"""


def graph_of(base: Path, folder: Path):
    from srpo_dsl.lang import analyze

    (folder / "p.j2").write_text("{{ task.question }}")
    result = analyze(WORKFLOW.format(base=base), str(folder / "w.srpo"), [folder])
    assert result.ok, result.diagnostics
    return result.program


def seeded_lora(module, pattern: str, seed: int) -> None:
    """Give the LoRA weights matching `pattern` random values (B = 0 at init would hide A's gradient), in
    the module and in ZeRO's fp32 master copy."""
    import deepspeed
    import torch
    from deepspeed.utils import safe_set_full_fp32_param

    params = sorted((n, p) for n, p in module.named_parameters() if ".lora_" in n and pattern in n)
    generator = torch.Generator().manual_seed(seed)
    values = [
        torch.randn(tuple(getattr(p, "ds_shape", p.shape)), generator=generator) * 0.3 for _, p in params
    ]
    with deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=0):
        for (_, p), value in zip(params, values):
            p.data.copy_(value)
    for (_, p), value in zip(params, values):
        safe_set_full_fp32_param(p, value)


def shared(base: Path, folder: Path, dist, **options):
    """The base with adapters a and b: one engine."""
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.engines.ds_engine import ds_config
    from srpo_dsl.rl.engines.policies import build_policies

    graph = graph_of(base, folder)
    opts = TrainOptions(**options)
    config = ds_config(opts, device="cpu", world_size=1, user=SGD)
    policies = build_policies(graph, {n: str(base) for n in graph.policies}, opts, dist, config)
    seeded_lora(policies["a"].module, ".adapter_a.", 1)
    seeded_lora(policies["a"].module, ".adapter_b.", 2)
    return policies, opts
