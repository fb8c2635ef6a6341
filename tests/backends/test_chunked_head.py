"""The chunked output head (`backends/chunked_head.py`): response log-probs, entropies and their gradients
equal the whole-logits path's to 1e-6 for every scoring, with adapters, tied or untied embeddings and
temperature != 1, and through real `srpo` and `traj` updates (ZeRO-3 too, and two ZeRO-3 ranks with
unequal chunk counts); no tensor as wide as the logits is made or kept; the memory bench's smoke run.

Run as a script, this file is the worker of the two-rank test: `python tests/backends/test_chunked_head.py zero3
OUT.pt MODEL_A MODEL_B` (under torchrun)."""

from __future__ import annotations

import inspect
import re
from contextlib import nullcontext

import pytest

from tests.support.training import (  # noqa: F401  (`one_thread`: the autouse fixture, one torch thread)
    CONVERSATION_TEMPERATURES,
    TEMPERATURES,
    assert_close,
    build,
    chained_rows,
    conversation_episodes,
    make_episodes,
    make_models,
    one_thread,
    parameters,
)

CHUNK = 3  # tokens per chunk in these tests: several chunks per call, the last one short
SHAPE = {"vocab_size": 300, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}  # the models'
SHAPE |= {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "pad_token_id": 0}


@pytest.fixture
def small_chunks(monkeypatch):
    """`CHUNK` tokens of logits per chunk, for a vocabulary of `vocab` ids."""
    from srpo_dsl.backends.logprobs import PickedLogprobs

    return lambda vocab: monkeypatch.setattr(PickedLogprobs, "CHUNK_BYTES", 4 * vocab * CHUNK)


def tiny(kind: str):
    """A random 1-layer causal LM (vocabulary 300, hidden 32): a Llama, untied or tied, or a tied Qwen3."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    if kind == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(tie_word_embeddings=True, **SHAPE)).eval()
    return LlamaForCausalLM(LlamaConfig(tie_word_embeddings=kind == "tied", **SHAPE)).eval()


def with_routed_adapters(model):
    """`model` with LoRA adapters x (every linear) and y (q, v), their weights made non-zero."""
    import torch

    from srpo_dsl.rl.engines.adapters import with_adapters
    from tests.support.adapters import LORA_A, LORA_B

    model = with_adapters(model, {"x": LORA_A, "y": LORA_B}).eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    return model


def scored(model, scoring: str, follows: bool, adapters: list[str] | None, chunked: bool, temperature=0.7):
    """Log-probs, entropies and the parameter gradients of a weighted mean of both, one backward."""
    import torch

    from srpo_dsl.backends.chunked_head import full_logits
    from srpo_dsl.backends.logprobs import response_logprobs

    prompts, responses, links, _ = chained_rows()
    model.zero_grad()
    with nullcontext() if chunked else full_logits():
        lp, h = response_logprobs(
            model, prompts, responses, 0, temperature, torch.device("cpu"), True, adapters, scoring,
            links if follows else None,
        )  # fmt: skip
    weights = torch.randn(lp.shape, generator=torch.Generator().manual_seed(1))
    ((weights * lp).mean() + 0.3 * h.mean()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), h.detach(), grads


@pytest.mark.parametrize("kind", ["untied", "tied", "qwen3"])
@pytest.mark.parametrize("adapters", [False, True])
@pytest.mark.parametrize(("scoring", "follows"), [("cached", False), ("uncached", False), ("packed", False),
                                                  ("packed", True)])  # fmt: skip
def test_chunked_scores_and_gradients_equal_the_whole_logits(
    small_chunks, monkeypatch, kind, adapters, scoring, follows
):
    """Every scoring (packed with `follows` chains too), with and without adapters routed per row, at
    temperature 0.7: log-probs, entropies and every parameter's gradient to 1e-6; the head module ran
    once, over the `[tokens, H]` states of the response tokens, and its chunks of `CHUNK` tokens ran
    again in the backward; never over the model's `[rows, T, H]` states."""
    from srpo_dsl.backends import chunked_head

    model = tiny(kind)
    small_chunks(SHAPE["vocab_size"])
    head = chunked_head.causal_lm(model).lm_head
    assert (head.weight is chunked_head.causal_lm(model).model.embed_tokens.weight) == (kind != "untied")
    if adapters:
        model = with_routed_adapters(model)
    names = chained_rows()[3] if adapters else None
    calls: list[tuple[int, ...]] = []
    head.register_forward_hook(lambda _, args, out: calls.append(tuple(args[0].shape)))
    whole = scored(model, scoring, follows, names, chunked=False)
    assert len(calls) in (1, 2) and all(len(shape) == 3 for shape in calls)  # the model's own head calls
    calls.clear()
    chunks: list[int] = []  # the tokens of each chunk scored, forward and backward
    scored_chunk = chunked_head._scored
    monkeypatch.setattr(chunked_head, "_scored", lambda *a: chunks.append(len(a[2])) or scored_chunk(*a))
    chunked = scored(model, scoring, follows, names, chunked=True)
    tokens = sum(map(len, chained_rows()[1]))
    assert calls == [(tokens, SHAPE["hidden_size"])]
    assert chunks == 2 * [min(CHUNK, tokens - k) for k in range(0, tokens, CHUNK)]
    assert (chunked[0] - whole[0]).abs().max() <= 1e-6 and (chunked[1] - whole[1]).abs().max() <= 1e-6
    assert chunked[2].keys() == whole[2].keys() and len(whole[2]) > 0
    assert_close(chunked[2], whole[2], atol=1e-6)
    assert (whole[0] != 0).sum() == tokens and max(g.abs().max() for g in whole[2].values()) > 1e-3


@pytest.mark.parametrize("temperature", [0.0, 1.0, 1.5])
def test_other_temperatures_score_alike(small_chunks, temperature):
    """Greedy (scored at 1), 1 and 1.5: log-probs, entropies and gradients to 1e-6."""
    model = tiny("tied")
    small_chunks(SHAPE["vocab_size"])
    whole, chunked = (scored(model, "cached", False, None, c, temperature) for c in (False, True))
    assert (chunked[0] - whole[0]).abs().max() <= 1e-6 and (chunked[1] - whole[1]).abs().max() <= 1e-6
    assert_close(chunked[2], whole[2], atol=1e-6)


def vocab_tensors(model, scoring: str, chunked: bool) -> tuple[int, int]:
    """Over one forward and backward of `scored`, tensors over the vocabulary (last dimension V; not the
    head's `[H, V]` weight seen transposed): the most elements of any that an op made (a dispatch mode
    sees every op's output, the backward's too), and the elements of all of them kept for the backward
    (saved-tensor hooks; a checkpointed region's own hooks keep theirs from these)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    weight = (model.config.hidden_size, model.config.vocab_size)
    over_vocab = lambda t: t.dim() and t.shape[-1] == weight[1] and tuple(t.shape) != weight  # noqa: E731
    made, saved = [0], [0]

    class Widest(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            sizes = [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor) and over_vocab(t)]
            made[0] = max([made[0], *sizes])
            return out

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() if over_vocab(t) else 0
        return t

    with Widest(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        scored(model, scoring, scoring == "packed", None, chunked)
    return made[0], saved[0]


@pytest.mark.parametrize("scoring", ["cached", "uncached", "packed"])
def test_no_tensor_as_wide_as_the_logits_is_made_or_kept(small_chunks, scoring):
    """With the chunked head no tensor over the vocabulary holds more than one chunk of tokens, forward or
    backward, and none is kept for the backward (each chunk's logits are recomputed); the whole-logits
    path makes one of every response token at least (`[rows, T, V]`, its float32 copy or its gradient),
    and keeps the logits."""
    model = tiny("untied")
    vocab, tokens = SHAPE["vocab_size"], sum(map(len, chained_rows()[1]))
    small_chunks(vocab)
    made, saved = vocab_tensors(model, scoring, chunked=True)
    assert 0 < made <= CHUNK * vocab and saved == 0
    made, saved = vocab_tensors(model, scoring, chunked=False)
    assert made >= tokens * vocab and saved >= tokens * vocab


def forward_assigns(cls) -> list[str]:
    """The statements of `cls.forward` that assign `logits`."""
    return re.findall(r"^\s*logits = .*$", inspect.getsource(cls.forward), flags=re.M)


def test_plain_heads_are_the_forwards_that_return_the_head_output():
    """Each `PLAIN_HEADS` architecture's `*ForCausalLM.forward` assigns its logits once, `self.lm_head(...)`,
    and its head is an `nn.Linear`; Gemma 2's soft-capping, Cohere's and Granite's scales fail the check."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as CAUSAL

    from srpo_dsl.backends.chunked_head import PLAIN_HEADS

    def plain(model_type: str) -> bool:
        cls = getattr(transformers, CAUSAL[model_type])
        assigns = forward_assigns(cls)
        linear = "self.lm_head = nn.Linear(" in inspect.getsource(cls.__init__)
        return linear and len(assigns) == 1 and "= self.lm_head(" in assigns[0]

    assert all(plain(t) for t in PLAIN_HEADS)
    assert not any(plain(t) for t in ("gemma2", "cohere", "granite"))


def test_the_head_is_swapped_only_where_it_qualifies():
    """`output_head` swaps a plain head for the block and puts it back (after an error too); a LoRA head,
    an architecture outside `PLAIN_HEADS` and `full_logits` keep the model as it is."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from srpo_dsl.backends.chunked_head import causal_lm, full_logits, output_head

    model = tiny("tied")
    head = model.lm_head
    with pytest.raises(RuntimeError, match="inside"), output_head(model) as swapped:
        assert swapped is head and isinstance(model.lm_head, torch.nn.Identity)
        raise RuntimeError("inside")
    assert model.lm_head is head
    with full_logits(), output_head(model) as swapped:
        assert swapped is None and model.lm_head is head
    lora = get_peft_model(tiny("untied"), LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    with output_head(lora) as swapped:
        assert swapped is None and type(causal_lm(lora).lm_head) is not torch.nn.Linear
    gemma = Gemma2ForCausalLM(Gemma2Config(**SHAPE))
    with output_head(gemma) as swapped:
        assert swapped is None and isinstance(gemma.lm_head, torch.nn.Linear)


def updated(models, dist, tmp_path, objective: str, options: dict, chunked: bool):
    """The weights and stats of one `update` (two epochs), chunked head or whole logits; the head's calls."""
    from srpo_dsl.backends.chunked_head import causal_lm, full_logits
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    options = {"objective": objective, "epochs": 2, "grad_clip": 0.5, **options}
    talk = options.pop("conversations", False)
    rows = build_rows(conversation_episodes() if talk else make_episodes(mixed=True), objective)
    if options.pop("adapters", False):
        from tests.support.adapters import shared

        tmp_path.mkdir()
        policies, opts = shared(models[0], tmp_path, dist, **options)
    else:
        policies, opts = build({"a": models[0], "b": models[1]}, dist, **options)
    calls: list[int] = []
    for policy in {id(p.module): p for p in policies.values()}.values():
        causal_lm(policy.module).lm_head.register_forward_hook(lambda _, a, o: calls.append(a[0].dim()))
    with nullcontext() if chunked else full_logits():
        stats = update(policies, rows, opts, dist, CONVERSATION_TEMPERATURES if talk else TEMPERATURES)
    return parameters(policies), stats, calls


@pytest.mark.slow
@pytest.mark.parametrize(
    ("objective", "options"),
    [
        ("srpo", {}),
        ("traj", {}),
        ("srpo", {"entropy": 0.5, "gradient_checkpointing": True}),  # uncached scoring
        ("srpo", {"pack_rows": True, "conversations": True, "kl": 0.5}),  # follows chains, packed reference
        ("traj", {"pack_rows": True, "conversations": True}),
        ("srpo", {"adapters": True}),
        ("traj", {"adapters": True, "pack_rows": True, "conversations": True}),
        ("srpo", {"zero": 3, "micro_batches": 2}),
        ("srpo", {"adapters": True, "zero": 3, "micro_batches": 2}),  # a frozen head, gathered per chunk
    ],
)
def test_updates_with_the_chunked_head_step_like_whole_logits(
    models, dist, tmp_path, small_chunks, objective, options
):
    """A real update (DeepSpeed engines, SGD lr 1: the weights carry the gradients) with the chunked head,
    `CHUNK` tokens a chunk, gives the whole-logits update: weights and loss to 1e-6, grad norm to 1e-6
    relative; packed conversations (`follows` chains), adapters routed per row and ZeRO-3 too."""
    from transformers import AutoConfig

    small_chunks(AutoConfig.from_pretrained(models[0]).vocab_size)
    whole = updated(models, dist, tmp_path / "whole", objective, dict(options), chunked=False)
    chunked = updated(models, dist, tmp_path / "chunked", objective, dict(options), chunked=True)
    assert whole[2] and set(whole[2]) == {3} and chunked[2] and set(chunked[2]) == {2}  # the path each took
    assert_close(chunked[0], whole[0], atol=1e-6)
    assert chunked[1]["loss"] == pytest.approx(whole[1]["loss"], abs=1e-6)
    assert chunked[1]["grad_norm"] == pytest.approx(whole[1]["grad_norm"], rel=1e-6)
    assert whole[1]["clip_fraction"] == chunked[1]["clip_fraction"] > 0


@pytest.mark.slow
def test_the_logits_memory_bench_smoke_run_shows_the_saving(tmp_path):
    """`bench/logits_memory_bench.py --smoke` runs both sides, appends each to its JSON Lines file and prints
    the table; the chunked side adds under half of what the whole logits add."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "logits_memory_bench.py"
    out = tmp_path / "memory.jsonl"
    done = subprocess.run(
        [sys.executable, script, "--smoke", "--json", out], capture_output=True, text=True, check=True
    )
    whole, chunked = (json.loads(line) for line in out.read_text().splitlines())
    assert (whole["side"], chunked["side"]) == ("whole", "chunked") and "| chunked |" in done.stdout
    assert 0 < chunked["added_mib"] < whole["added_mib"] / 2


def sharded_zero3(dist, model_a: str, model_b: str) -> tuple[dict, dict]:
    """ZeRO-3, each rank its share of the events (unequal token counts: unequal chunk counts), `CHUNK`
    tokens a chunk; the weights and stats."""
    from transformers import AutoConfig

    from srpo_dsl.backends.logprobs import PickedLogprobs
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    PickedLogprobs.CHUNK_BYTES = 4 * CHUNK * AutoConfig.from_pretrained(model_a).vocab_size
    rows = build_rows(make_episodes(mixed=True), "srpo")
    mine = [i for i, e in enumerate(rows.event_ids.tolist()) if e % dist.world_size == dist.rank]
    policies, opts = build({"a": model_a, "b": model_b}, dist, zero=3, micro_batches=2, grad_clip=0.5)
    stats = update(policies, rows.select(mine), opts, dist, TEMPERATURES)
    return parameters(policies), stats


def zero3_worker(out: str, model_a: str, model_b: str) -> None:
    import torch

    from srpo_dsl.rl.distributed.process_group import init_distributed

    dist = init_distributed("cpu")
    params, stats = sharded_zero3(dist, model_a, model_b)
    if dist.rank == 0:
        torch.save({"params": params, "stats": stats}, out)


@pytest.mark.distributed
@pytest.mark.slow
def test_zero3_ranks_with_unequal_chunk_counts_match_one_process(models, dist, tmp_path, monkeypatch):
    """Two gloo ranks at ZeRO-3 scoring different numbers of tokens, so different numbers of chunks, gather
    the head alike (once per scoring call) and give the one-process update."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import torch

    from srpo_dsl.backends.logprobs import PickedLogprobs
    from srpo_dsl.rl.distributed.process_group import free_port

    monkeypatch.setattr(PickedLogprobs, "CHUNK_BYTES", PickedLogprobs.CHUNK_BYTES)  # set back after
    here, out = Path(__file__).resolve(), tmp_path / "params.pt"
    env = {**os.environ, "PYTHONPATH": str(here.parents[2]), "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port"]
    done = subprocess.run(
        [*launch, str(free_port()), str(here), "zero3", str(out), str(models[0]), str(models[1])],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    two = torch.load(out, weights_only=False)
    params, stats = sharded_zero3(dist, str(models[0]), str(models[1]))
    assert_close(params, two["params"])
    assert stats["loss"] == pytest.approx(two["stats"]["loss"], abs=1e-6)


if __name__ == "__main__":
    import sys

    {"zero3": zero3_worker}[sys.argv[1]](*sys.argv[2:])
