"""Conversation agents (`observe`): a replica's turns are one token stream, appended to, never re-encoded."""

import itertools
import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from srpo_dsl.api import load
from srpo_dsl.backends.base import BackendError
from srpo_dsl.backends.chat import TokenizerChat, encode_prompts, template_pieces
from srpo_dsl.lang import analyze
from srpo_dsl.models.tiny import SHIPPED
from tests.support.lang_cases import BASE

ROOT = Path(__file__).resolve().parents[2]
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return AutoTokenizer.from_pretrained(str(SHIPPED))


def _chat_workflow(folder: Path, temperature: float) -> Path:
    """The shipped conversation quickstart in `folder`, sampling at `temperature`."""
    shutil.copytree(ROOT / "workflows" / "quickstart_tools", folder / "quickstart_tools")
    text = (ROOT / "workflows" / "quickstart_tools_chat.srpo").read_text(encoding="utf-8")
    path = folder / "w.srpo"
    path.write_text(text.replace("temperature = 1.0", f"temperature = {temperature}"), encoding="utf-8")
    return path


def test_later_turns_append_the_sampled_ids_even_where_the_text_reencodes_otherwise(tmp_path, tiny_tokenizer):
    """Every later turn's prompt begins with the turn before's prompt and reply ids as sampled; some replies
    (hot sampling) are ids that re-encoding their text would not give, and still they are what follows."""
    rollouts = load(_chat_workflow(tmp_path, 1.6)).run(limit=16, samples=4, seed=1, progress=False)
    eos = tiny_tokenizer.eos_token_id
    turns, reencoded_otherwise = 0, 0
    for ep in rollouts.episodes:
        members = [e.members[0] for e in ep.events]
        for before, after in itertools.pairwise(members):
            sampled = before.prompt_token_ids + before.response_token_ids
            assert after.prompt_token_ids[: len(sampled)] == sampled
            turns += 1
            reply = before.response_token_ids
            body = reply[:-1] if reply[-1] == eos else reply
            reencoded_otherwise += tiny_tokenizer(before.text, add_special_tokens=False)["input_ids"] != body
    assert turns > 20 and reencoded_otherwise > 0


def test_the_observe_template_renders_what_came_since_the_replicas_last_turn(tmp_path, tiny_tokenizer):
    """Scripted replies: turn 2's prompt is turn 1's prompt + reply ids + the calculator's result as the
    observe template renders it (` 5 `), encoded alone; the forced last turn adds ` ! `. A scripted reply
    has no EOS of its own, so the template's closing of the assistant turn (EOS) comes first."""
    (tmp_path / "replies.json").write_text(json.dumps({"solver": ["<calc>2+3</calc>"]}))
    workflow = load(_chat_workflow(tmp_path, 1.0))
    rollouts = workflow.run(limit=1, backend="scripted", models=tmp_path / "replies.json", progress=False)
    members = [e.members[0] for e in rollouts.episodes[0].events]
    assert len(members) == 4  # three turns asking, then the forced answer
    question = rollouts.episodes[0].events[0].members[0]
    first = encode_prompts(tiny_tokenizer, [tiny_tokenizer.decode(question.prompt_token_ids[1:])], True)[0]
    assert question.prompt_token_ids == first
    appended = lambda text: tiny_tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for k, (before, after) in enumerate(itertools.pairwise(members), 1):
        tail = " 5 !" if k == 3 else " 5"
        want = before.prompt_token_ids + before.response_token_ids + appended(f"</s>{tail} ")
        assert after.prompt_token_ids == want


def test_the_tiny_models_chat_template_keeps_its_one_message_prompts(tiny_tokenizer):
    """The embedded model's chat template renders one user message as BOS + text: every workflow's prompts
    on it are the ids they were before it had one."""
    prompts = ["Q 3+4= ", "S 17+25= <calc>1</calc> 7", "\\boxed{12} x"]
    assert tiny_tokenizer.chat_template
    assert encode_prompts(tiny_tokenizer, prompts, True) == encode_prompts(tiny_tokenizer, prompts, False)


def test_a_chat_templates_pieces_close_the_reply_then_open_the_next_message(tiny_tokenizer):
    """A ChatML template: after a reply that sampled EOS, only the newline the template writes after it is
    added; after a cut reply, the whole closing (EOS, newline); then the user message and the generation
    prompt."""
    tok = AutoTokenizer.from_pretrained(str(SHIPPED))
    tok.chat_template = CHATML.replace("<|im_end|>", "</s>")
    assert template_pieces(tok) == ("</s>\n", "<|im_start|>user\n", "</s>\n<|im_start|>assistant\n")
    chat = TokenizerChat(tok, True, {tok.eos_token_id})
    encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    stopped, cut = [5, 6, tok.eos_token_id], [5, 6, 7]
    assert chat.then("hi", stopped) == encode("\n<|im_start|>user\nhi</s>\n<|im_start|>assistant\n")
    assert chat.then("hi", cut) == encode("</s>\n<|im_start|>user\nhi</s>\n<|im_start|>assistant\n")


def test_a_template_that_rewrites_earlier_turns_cannot_keep_a_conversation():
    tok = AutoTokenizer.from_pretrained(str(SHIPPED))
    tok.chat_template = (  # drops every assistant turn but the last, as some reasoning templates do
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }}"
        "{% endif %}{% endfor %}"
    )
    with pytest.raises(BackendError, match="rewrites earlier turns"):
        template_pieces(tok)


def test_an_observe_template_is_checked_like_a_prompt_template(tmp_path):
    """A missing one is E080 at the option's value; a variable no step provides is E082; `new_history` is
    one the runtime provides."""
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "o.j2").write_text("{% for h in new_history %}{{ h.text }}{% endfor %}")
    (tmp_path / "bad.j2").write_text("{{ nothing }}")
    agent = 'agent agg uses lm prompt "p.j2" emits final_boxed'
    for template, codes in (("o.j2", []), ("missing.j2", ["E080"]), ("bad.j2", ["E082"])):
        text = BASE.replace(agent, f'{agent} with (observe = "{template}")')
        diags = analyze(text, str(tmp_path / "w.srpo")).diagnostics
        assert [d.code for d in diags] == codes
        if codes:
            line = text.splitlines()[diags[0].span.line - 1]
            assert line[diags[0].span.col - 1 :].startswith(f'"{template}"')


@pytest.mark.parametrize(
    ("workflow", "overrides", "packed"),
    [
        ("quickstart_tools_chat.srpo", {}, True),
        ("quickstart_tools.srpo", {}, False),
        ("quickstart_tools_chat.srpo", {"pack_rows": False}, False),
    ],
)
def test_rows_are_packed_by_default_where_an_agent_keeps_a_conversation(
    tmp_path, workflow, overrides, packed
):
    from srpo_dsl.rl.loop.plan import plan_file

    plan = plan_file(ROOT / "workflows" / workflow, tmp_path / "run", overrides=overrides, device="cpu")
    assert plan.opts.pack_rows is packed


@pytest.mark.slow
def test_the_multiturn_bench_scores_a_conversation_once_with_the_same_update(tmp_path):
    """bench/multiturn_bench.py on the tool quickstart at 2 and 4 turns: the conversation's stream reads
    fewer update tokens than today's prompts and than its own rows one by one, the gap grows with the
    turns, prefix caching prefills less, and both scorings give one update (loss, gradient norm)."""
    import argparse

    from tests.support.clitools import load_bench

    bench = load_bench("multiturn_bench")
    args = argparse.Namespace(turns=[2, 4], prompts=2, group=2, repeats=1, device="cpu", budget=4096)
    table = bench.bench_case("quickstart_tools", bench.CASES["quickstart_tools"], args, tmp_path, "unused")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    tokens = {(int(c[1]), c[2]): int(c[4].replace(",", "")) for c in cells}
    for turns in (2, 4):
        stream, rows, today = (
            tokens[(turns, p)] for p in ("conversation, stream", "conversation, rows", "today")
        )
        assert stream < rows and stream < today
    assert (
        tokens[(4, "today")] / tokens[(4, "conversation, stream")]
        > tokens[(2, "today")] / tokens[(2, "conversation, stream")]
    )
    for c in cells:
        if c[2] == "conversation, stream":
            assert int(c[8].replace(",", "")) < int(c[7].replace(",", ""))  # prefix cache: new messages only
            assert float(c[9]) < 1e-5


def test_the_hf_engine_keeps_a_conversations_kv_between_its_turns(tiny_tokenizer):
    """Turn 2 of four conversations (one cut at max_tokens, with its own appended closing) on the `dynamic`
    loop: with the KV kept from turn 1, only the new ids are prefilled, and the draws and their log-probs
    are those of an engine that prefills every prompt whole."""
    import torch

    from srpo_dsl.backends.base import GenRequest
    from srpo_dsl.backends.hf import HFBackend

    def engine() -> HFBackend:
        return HFBackend(str(SHIPPED), decode="dynamic")

    kept, fresh = engine(), engine()
    questions = ["Q 3+4= ", "Q 12+9= ", "Q 7*8= ", "Q 40+2= "]
    chat = kept.chat_encoder()
    first = [
        GenRequest(q, 12 if i else 3, prompt_ids=tuple(chat.first(q)), prefix=0, seed=i)
        for i, q in enumerate(questions)
    ]
    replies = kept.generate(first)
    assert len(kept.decoder.turns.entries) == 4 and replies[0].finish_reason == "length"
    second = []
    for i, (request, reply) in enumerate(zip(first, replies)):
        so_far = [*request.prompt_ids, *reply.response_token_ids]
        ids = (*so_far, *chat.then(" 7 ", so_far))
        second.append(GenRequest("", 8, prompt_ids=ids, prefix=len(so_far), seed=10 + i))
    widths = []
    hook = kept.model.register_forward_pre_hook(
        lambda m, a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    again = kept.generate(second)
    hook.remove()
    want = fresh.generate(
        [GenRequest(r.prompt, r.max_tokens, prompt_ids=r.prompt_ids, seed=r.seed) for r in second]
    )
    assert widths[0] < min(len(r.prompt_ids) for r in second) - 5  # the prefill ran over the new ids only
    assert (
        not kept.decoder.turns.entries or len(kept.decoder.turns.entries) == 4
    )  # turn 1's taken, turn 2's kept
    for a, b in zip(again, want):
        assert a.response_token_ids == b.response_token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    kept.sleep()
    assert not kept.decoder.turns.entries  # released before an update: the weights change


def test_a_model_whose_template_rewrites_turns_stops_a_conversation_run_in_one_line(tmp_path):
    """`srpo-dsl run` of a conversation agent on such a model: one line naming the cause, exit 2, no folder."""
    from tests.support.clitools import cli

    model = tmp_path / "model"
    shutil.copytree(SHIPPED, model)
    (model / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }}{% endif %}"
        "{% endfor %}"
    )
    out = tmp_path / "run"
    done = cli("run", "workflows/quickstart_tools_chat.srpo", "--model", model, "--limit", "1", "--out", out)
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().splitlines() == [
        "error: the model's chat template rewrites earlier turns when a message is added: its conversations "
        "cannot be kept as one token stream (give its policy a prefix-preserving template, "
        '`hf(MODEL, chat_template = "FILE.jinja")`: for Qwen3 the shipped `templates/qwen3_training.jinja`; '
        "or drop the agent's `observe`)"
    ]
