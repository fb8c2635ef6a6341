"""A policy's own chat template (`hf(MODEL, chat_template = "FILE")`): checked at validate (E019), used in every
render of the policy's prompts; with the shipped prefix-preserving Qwen3 template
(`workflows/templates/qwen3_training.jinja`) a Qwen3 conversation agent keeps one token stream, which Qwen3's
own template refuses (it drops earlier turns' thinking)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from srpo_dsl.api import load
from srpo_dsl.backends.base import BackendError, GenRequest
from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.errors import UsageError
from srpo_dsl.lang import analyze
from srpo_dsl.lang.checks.declarations import PolicyInfo
from srpo_dsl.runtime.conversations import use_chat_templates
from tests.support.tools import CHAT, TOOL, call

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "workflows" / "templates" / "qwen3_training.jinja"
FIRST = "<think>\nA word: look it up.\n</think>\n\n" + call("hermes", query="cat")
SECOND = "<think>\nIt says so.\n</think>\n\n<answer>a meaning</answer>"


def _workflow(folder: Path, template: str | None, observe: bool = True) -> Path:
    """A Qwen3 agent with the `lookup` tool (`tool_format = "hermes"`): it acts, its call runs, it acts again
    (a conversation with `observe`), with `template` as its policy's `chat_template` (None: Qwen3's own)."""
    (folder / "tools.py").write_text(TOOL)
    (folder / "q.j2").write_text("Define {{ task.question }}.")
    (folder / "obs.j2").write_text("{% for h in new_history %}{{ h.result | default(h.text) }}{% endfor %}")
    given = f', chat_template = "{template}"' if template is not None else ""
    kept = ', observe = "obs.j2"' if observe else ""
    path = folder / "w.srpo"
    path.write_text(
        "workflow w\n"
        f'policy lm = hf("{CHAT / "qwen3"}", tool_format = "hermes"{given})\n'
        "task arith(n = 8, seed = 0)\n"
        'tool lookup = "tools.py:lookup"(timeout = 5)\n'
        f'agent solver uses lm prompt "q.j2" emits act(lookup, answer) with (max_tokens = 96{kept})\n'
        "act solver\ncall lookup on solver\nact solver\n"
        "reward exact_match(solver, task.answer)\n"
    )
    (folder / "replies.json").write_text(json.dumps({"solver": [FIRST, SECOND]}))
    return path


def _run(path: Path):
    return load(path).run(limit=1, backend="scripted", models=path.parent / "replies.json", progress=False)


def test_a_qwen3_conversation_on_the_training_template_extends_each_turns_tokens(tmp_path):
    """Turn 2's prompt is turn 1's prompt and sampled reply (its thinking kept) then the tool's result as a
    `tool` message: token for token Qwen3's format of [user, assistant, tool]. Qwen3's own template drops
    the reply's thinking once a user message follows (and gives a last reply without any an empty one)."""
    shutil.copy(TRAINING, tmp_path / "qwen3_training.jinja")
    path = _workflow(tmp_path, "qwen3_training.jinja")
    first, second = (e.members[0] for e in _run(path).episodes[0].events)
    so_far = [*first.prompt_token_ids, *first.response_token_ids]
    assert second.prompt_token_ids[: len(so_far)] == so_far and len(second.prompt_token_ids) > len(so_far)
    assert first.parsed == {"action": "lookup", "value": "cat"}
    assert second.parsed == {"action": "answer", "value": "a meaning"}
    tok = AutoTokenizer.from_pretrained(CHAT / "qwen3")
    decoded = tok.decode(first.prompt_token_ids)
    question = decoded[decoded.index("Define ") : decoded.index(".", decoded.index("Define ")) + 1]
    schema = json.loads(analyze(path.read_text(), str(path), [tmp_path]).program.agents["solver"].tools[0])
    messages = [
        {"role": "user", "content": question},
        {"role": "assistant", "content": FIRST},
        {"role": "tool", "content": "a meaning"},
    ]
    render = {"tools": [schema], "add_generation_prompt": True, "tokenize": False}
    want = tok.apply_chat_template(messages, chat_template=TRAINING.read_text(), **render)
    assert tok.decode(second.prompt_token_ids) == want
    assert "<think>\nA word: look it up.\n</think>" in want
    followed = [*messages[:2], {"role": "user", "content": "a meaning"}]
    assert "look it up" in tok.apply_chat_template(followed, chat_template=TRAINING.read_text(), **render)
    assert "look it up" not in tok.apply_chat_template(followed, **render)  # Qwen3's own drops it


def test_qwen3s_own_template_is_still_refused_naming_the_chat_template_option(tmp_path):
    path = _workflow(tmp_path, None)
    with pytest.raises(UsageError) as err:
        _run(path)
    message = str(err.value)
    assert "rewrites earlier turns" in message and "\n" not in message
    assert 'chat_template = "FILE.jinja"' in message and "templates/qwen3_training.jinja" in message


def test_the_template_is_read_from_the_workflows_folder_into_the_graph(tmp_path):
    (tmp_path / "templates").mkdir()
    shutil.copy(TRAINING, tmp_path / "templates" / "t.jinja")
    path = _workflow(tmp_path, "templates/t.jinja")
    result = analyze(path.read_text(), str(path), [tmp_path])
    assert result.ok, result.diagnostics
    assert result.graph.graph["policies"]["lm"]["chat_template"] == TRAINING.read_text()
    assert result.program.policies["lm"].chat_template == TRAINING.read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "`chat_template`: no file `t.jinja` (looked for "),
        (
            "{% for m in messages %}{{ m.content }",
            "`chat_template`: `t.jinja` is not a Jinja template: line 1: ",
        ),
    ],
)
def test_a_missing_or_broken_template_is_e019_at_its_value(tmp_path, text, message):
    if text is not None:
        (tmp_path / "t.jinja").write_text(text)
    path = _workflow(tmp_path, "t.jinja")
    result = analyze(path.read_text(), str(path), [tmp_path])
    (diag,) = [d for d in result.diagnostics if d.severity == "error"]
    assert diag.code == "E019" and diag.message.startswith(message)
    line = path.read_text().splitlines()[diag.span.line - 1]
    assert line[diag.span.col - 1 :].startswith('"t.jinja"')


def test_a_template_with_transformers_generation_block_is_valid(tmp_path):
    """TRL-style training templates mark assistant text with `{% generation %}`, which transformers parses."""
    body = TRAINING.read_text().replace("{{- content }}", "{% generation %}{{- content }}{% endgeneration %}")
    (tmp_path / "t.jinja").write_text(body)
    path = _workflow(tmp_path, "t.jinja")
    assert analyze(path.read_text(), str(path), [tmp_path]).ok


def test_the_tool_format_is_checked_against_the_given_template(tmp_path):
    (tmp_path / "t.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    path = _workflow(tmp_path, "t.jinja")
    (diag,) = analyze(path.read_text(), str(path), [tmp_path]).diagnostics
    assert diag.code == "E018" and "the policy's `chat_template` never writes `<tool_call>`" in diag.message


def _policy(template: str | None) -> PolicyInfo:
    return PolicyInfo("lm", "hf", "m", True, None, {}, chat_template=template)


def test_a_one_message_prompt_renders_with_the_policys_template(tiny_random_model):
    """Also where the model's own template is off: the policy's template is every render's."""
    backend = HFBackend(tiny_random_model, use_chat_template=False)
    use_chat_templates({"lm": _policy("[{{ messages[0].content }}]")}, {"lm": backend})
    (out,) = backend.generate([GenRequest("S 1+1=", 1)], seed=0)
    assert out.prompt_token_ids == backend.tokenizer("[S 1+1=]", add_special_tokens=False)["input_ids"]


def test_a_template_for_a_backend_without_tokenizer_or_two_for_one_backend_is_refused():
    with pytest.raises(BackendError, match="its `scripted` backend cannot use: it has no tokenizer"):
        use_chat_templates({"lm": _policy("x")}, {"lm": ScriptedBackend({"*": ["a"]})})
    shared = ScriptedBackend({"*": ["a"]}, tokenizer=CHAT / "qwen3")
    policies = {"a": _policy("x"), "b": _policy("y")}
    with pytest.raises(BackendError, match="policies `a` and `b` share one backend"):
        use_chat_templates(policies, {"a": shared, "b": shared})
