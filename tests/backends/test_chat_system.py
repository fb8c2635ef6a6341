"""`system "TEMPLATE"` on an agent: rendered from the turn's context and given to the model's chat template as
the system message (real chat templates: tests/data/chat_tokenizers, tokenizer files only)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from srpo_dsl.api import load
from srpo_dsl.backends.base import BackendError
from srpo_dsl.backends.chat import ByteChat, TokenizerChat
from srpo_dsl.lang import analyze
from srpo_dsl.lang.tooling.format import format_source
from tests.support.tools import CHAT


def _workflow(folder: Path, model: str, system: str = ' system "sys.j2"', observe: str = "") -> Path:
    (folder / "q.j2").write_text("S {{ task.question }}=")
    (folder / "sys.j2").write_text("You are {{ role }}, turn {{ turn }}.")
    path = folder / "w.srpo"
    path.write_text(
        "workflow w\n"
        f'policy lm = hf("{model}")\n'
        "task arith(n = 8, seed = 0)\n"
        f'agent solver uses lm prompt "q.j2"{system} emits boxed with (max_tokens = 8{observe})\n'
        "act solver\n"
        "reward exact_match(solver, task.answer)\n"
    )
    return path


@pytest.mark.parametrize("folder", ["qwen3", "llama3_1", "hermes"])
def test_the_system_template_is_the_system_message_of_the_models_own_chat_template(tmp_path, folder):
    """The first prompt's ids are the chat template's rendering of [system, user] with the generation
    prompt, the system message rendered from the turn's context."""
    tok = AutoTokenizer.from_pretrained(CHAT / folder)
    (tmp_path / "replies.json").write_text(json.dumps({"solver": ["\\boxed{4}"]}))
    workflow = load(_workflow(tmp_path, str(CHAT / folder)))
    rollouts = workflow.run(limit=1, backend="scripted", models=tmp_path / "replies.json", progress=False)
    ids = rollouts.episodes[0].events[0].members[0].prompt_token_ids
    messages = [
        {"role": "system", "content": "You are solver, turn 1."},
        {"role": "user", "content": "\x00"},
    ]
    head, tail = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False).split("\x00")
    text = tok.decode(ids)
    assert text.startswith(head) and text.endswith(tail)
    assert re.fullmatch(r"S [0-9+*-]+=", text[len(head) : -len(tail)])
    assert ids == tok(text, add_special_tokens=False)["input_ids"]
    assert "You are solver, turn 1." in tok.decode(ids)


def test_a_conversation_agent_starts_with_its_system_message_and_appends_as_before():
    tok = AutoTokenizer.from_pretrained(CHAT / "qwen3")
    chat = TokenizerChat(tok, True, {tok.eos_token_id})
    first = tok.decode(chat.first("hi", "Be brief."))
    assert (
        first
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (
        chat.first("hi")
        == tok(
            tok.apply_chat_template(
                [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
            ),
            add_special_tokens=False,
        )["input_ids"]
    )


def test_a_system_message_without_a_chat_template_is_refused_in_one_line():
    with pytest.raises(BackendError, match="need a chat template"):
        ByteChat().first("hi", "Be brief.")


def test_a_missing_system_template_is_e080_at_its_string(tmp_path):
    path = _workflow(tmp_path, str(CHAT / "qwen3"), system=' system "nope.j2"')
    diags = [d for d in analyze(path.read_text(), str(path), [tmp_path]).diagnostics if d.code == "E080"]
    assert [d.message for d in diags] == ["template not found"]
    assert (
        diags[0].span.line == 4 and diags[0].span.col == path.read_text().splitlines()[3].index('"nope') + 1
    )


def test_the_system_template_is_checked_for_undefined_variables(tmp_path):
    path = _workflow(tmp_path, str(CHAT / "qwen3"))
    (tmp_path / "sys.j2").write_text("{{ nonesuch }}")
    assert [d.code for d in analyze(path.read_text(), str(path), [tmp_path]).diagnostics] == ["E082"]


def test_the_formatter_keeps_the_system_clause(tmp_path):
    path = _workflow(tmp_path, "m")
    text = path.read_text()
    assert format_source(text) == text
    assert analyze(text, str(path), [tmp_path]).program.agents["solver"].system == "sys.j2"


def test_run_refuses_a_system_message_without_a_chat_template_in_one_line(tmp_path):
    """`srpo-dsl run` with the scripted engine and no tokenizer for the policy (bytes: no chat template):
    one line naming the agent, exit 2, no run folder."""
    from tests.support.clitools import cli

    path = _workflow(tmp_path, str(tmp_path / "not-here"))
    (tmp_path / "replies.json").write_text(json.dumps({"solver": ["\\boxed{4}"]}))
    out = tmp_path / "run"
    done = cli("run", path, "--backend", "scripted", "--model", tmp_path / "replies.json", "--out", out)
    assert done.returncode == 2 and not out.exists(), done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: agent `solver` has a system message (`system`), which needs a chat template: "
        "the model of policy `lm` has none (or its chat template is turned off)"
    ]


def test_qwen3s_own_template_keeps_no_conversation_and_says_so():
    """Qwen3's template drops earlier turns' thinking when a message is added: a conversation agent on it
    is refused (a system message alone is not: test above)."""
    tok = AutoTokenizer.from_pretrained(CHAT / "qwen3")
    with pytest.raises(BackendError, match="rewrites earlier turns"):
        TokenizerChat(tok, True, {tok.eos_token_id}).appendable()
