"""The supervised warm-up that makes the tiny model, and its report.

A tokenizer (`tokenizer.py`) and a 2-layer Llama trained by a short supervised pass on the
response tokens of synthetic transcripts of every quickstart role and of the tool agent
(`transcripts.py`), on one CPU thread with fixed seeds so a rebuild gives the same bytes; then
saved, reloaded exactly as users load it, and measured on held-out questions (`evaluation.py`)
with sampling and with greedy decoding. Greedy decoding is much more accurate than sampling:
early RL gains are partly *sharpening* (see `warmup.json` in the model folder, which records both).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from srpo_dsl.backends.chat import encode_prompts
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.backends.logprobs import TokenBatch, pack_sequences, token_logprobs
from srpo_dsl.envs.arith import make_arith_tasks
from srpo_dsl.models.evaluation import evaluate_team, evaluate_tools
from srpo_dsl.models.recipe import TINY_MODEL_ID, Recipe, WarmupReport
from srpo_dsl.models.tokenizer import train_tokenizer
from srpo_dsl.models.transcripts import transcript_rows
from srpo_dsl.progress import progress as lines


def build(out: Path, recipe: Recipe, *, seed: int, progress: bool) -> WarmupReport:
    """Warm a model up, save it with its tokenizer into `out` and measure it on held-out questions."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same floating-point order on any machine load: same bytes
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model, tokenizer, loss = _warm_up(recipe, seed, progress)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        backend = HFBackend(out)  # reload exactly as users do (from_pretrained)
        questions = make_arith_tasks(recipe.eval_questions, seed, heldout=True)
        sampled = evaluate_team(backend, questions, temperature=1.0, seed=seed)
        greedy = evaluate_team(backend, questions, temperature=0.0, seed=seed)
        graded = make_arith_tasks(recipe.eval_questions, seed, heldout=True, mix="graded")
        sampled_tools = evaluate_tools(backend, graded, temperature=1.0, seed=seed)
        greedy_tools = evaluate_tools(backend, graded, temperature=0.0, seed=seed)
    finally:
        torch.set_num_threads(threads)
    return WarmupReport(
        seed=seed,
        parameters=sum(p.numel() for p in model.parameters()),
        steps=recipe.steps,
        batch=recipe.batch,
        final_loss=round(loss, 4),
        sampled_team_accuracy=sampled.team,
        greedy_team_accuracy=greedy.team,
        sampled_solver_accuracy=sampled.solver,
        greedy_solver_accuracy=greedy.solver,
        sampled_verifier_accuracy=sampled.verifier,
        greedy_verifier_accuracy=greedy.verifier,
        sampled_tool_accuracy=sampled_tools.accuracy,
        greedy_tool_accuracy=greedy_tools.accuracy,
        sampled_tool_call_rate=sampled_tools.call_rate,
        greedy_tool_call_rate=greedy_tools.call_rate,
    )


def _warm_up(
    recipe: Recipe, seed: int, progress: bool
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast, float]:
    """Tokenizer and model trained on response tokens of fresh synthetic episodes."""
    tokenizer, data = _dataset(recipe, seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden,
        intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    loss = _fit(model, data, recipe, progress)
    return model.eval(), tokenizer, loss


def _dataset(recipe: Recipe, seed: int) -> tuple[PreTrainedTokenizerFast, TokenBatch]:
    """The tokenizer trained on the transcripts' text, and every (prompt, response + EOS) row packed."""
    rows = transcript_rows(recipe, seed)
    prompts, responses = [p for p, _ in rows], [r for _, r in rows]
    unique_prompts, unique_responses = sorted(set(prompts)), sorted(set(responses))
    tokenizer = train_tokenizer(unique_prompts + responses)
    prompt_ids = dict(zip(unique_prompts, encode_prompts(tokenizer, unique_prompts, use_chat_template=False)))
    response_ids = dict(
        zip(unique_responses, tokenizer(unique_responses, add_special_tokens=False)["input_ids"])
    )
    data = pack_sequences(
        [prompt_ids[p] for p in prompts],
        [[*response_ids[r], tokenizer.eos_token_id] for r in responses],
        tokenizer.pad_token_id,
    )
    return tokenizer, data


def _fit(model: LlamaForCausalLM, data: TokenBatch, recipe: Recipe, progress: bool) -> float:
    """AdamW on the response tokens' mean negative log-likelihood; returns the smoothed final loss."""
    steps, batch = recipe.steps, recipe.batch
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    rows = len(data.input_ids)
    epochs = -(-steps * batch // rows)
    order = torch.cat([torch.randperm(rows) for _ in range(epochs)])[: steps * batch].view(steps, batch)
    loss_avg = 0.0
    model.train()
    bar = lines(range(steps), desc=f"warming up {TINY_MODEL_ID}", unit="step", enabled=progress)
    for step, idx in zip(bar, order):
        width = int(data.attention_mask[idx].sum(-1).max())
        mask = data.response_mask[idx, :width]
        lp = token_logprobs(model, data.input_ids[idx, :width], data.attention_mask[idx, :width], mask)
        loss = -lp.sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_avg = loss.item() if step == 0 else 0.98 * loss_avg + 0.02 * loss.item()
        if step % 50 == 0:
            bar.set_postfix_str(f"loss {loss_avg:.3f}")
    return loss_avg
