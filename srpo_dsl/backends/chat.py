"""A conversation's token ids, built by appending: the first turn's prompt, then after each sampled reply
the next message, encoded alone (`docs/dsl.md`, conversation agents).

Earlier turns are never re-tokenized: an agent's reply stays the ids it sampled, so the trainer scores
exactly what was generated (re-encoding decoded text can give other ids). With a chat template, the
first turn is one user message with the generation prompt, and each later message is what the template
adds after an assistant turn: the rest of that turn's closing (its end-of-turn token when the reply was
cut; the text the template writes after it, such as a newline), the user message, the generation prompt.
Those pieces are read once from the template by rendering a probe conversation. Without a chat template
(raw prompts: BOS + text), a later message is its text alone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from srpo_dsl.backends.base import BackendError

if TYPE_CHECKING:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

_PROBE = "\x00srpo-probe\x00"  # stands for a message's content while the template's pieces are read


class TokenizerChat:
    """A transformers tokenizer's conversation encoding (its chat template, else BOS + raw text)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, use_chat_template: bool, eos_ids: Collection[int]):
        self.tokenizer = tokenizer
        self.eos_ids = set(eos_ids)
        self.templated = use_chat_template
        self._pieces: tuple[str, str, str] | None = None  # read once, when a conversation first needs them
        self._roles: set[str] = set()  # the roles of later messages checked to append

    def appendable(self, role: str = "user") -> None:
        if self.templated and self._pieces is None:
            self._pieces = template_pieces(self.tokenizer)
        if self.templated and role != "user" and role not in self._roles:
            next_message(self.tokenizer, role, "x")
            self._roles.add(role)

    def first(self, text: str, system: str | None = None, tools: Sequence[dict] = ()) -> list[int]:
        if system is None and not tools:
            return encode_prompts(self.tokenizer, [text], self.templated)[0]
        if not self.templated:
            raise BackendError("a system message or tools need a chat template, and this model has none")
        system_message = [{"role": "system", "content": system}] if system is not None else []
        messages = [*system_message, {"role": "user", "content": text}]
        rendered = self.tokenizer.apply_chat_template(
            messages, tools=list(tools) or None, add_generation_prompt=True, tokenize=False
        )
        return self._encode(rendered)

    def then(self, text: str, so_far: Sequence[int], role: str = "user") -> list[int]:
        if not self.templated:
            return self._encode(text)
        self.appendable(role)
        closing, before, after = self._pieces  # type: ignore[misc]
        eos_text = self.tokenizer.eos_token or ""
        if so_far and so_far[-1] in self.eos_ids and eos_text and closing.startswith(eos_text):
            closing = closing[len(eos_text) :]  # the reply ended its turn itself: the sampled token stays
        if role != "user":  # the template's own writing of it (Llama 3.1 writes a tool's text as JSON)
            return self._encode(f"{closing}{next_message(self.tokenizer, role, text)}")
        return self._encode(f"{closing}{before}{text}{after}")

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], use_chat_template: bool
) -> list[list[int]]:
    """Prompt token ids: a one-turn user chat with the generation prompt, or raw text after BOS."""
    if use_chat_template:
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
        return tokenizer(texts, add_special_tokens=False)["input_ids"]
    ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    bos = tokenizer.bos_token_id
    return [[bos, *row] for row in ids] if bos is not None else ids


_REWRITES = (
    "the model's chat template rewrites earlier turns when a message is added: its conversations cannot be "
    "kept as one token stream (give its policy a prefix-preserving template, "
    '`hf(MODEL, chat_template = "FILE.jinja")`: for Qwen3 the shipped `templates/qwen3_training.jinja`; '
    "or drop the agent's `observe`)"
)


def template_pieces(tokenizer: PreTrainedTokenizerBase) -> tuple[str, str, str]:
    """(what the template writes after an assistant turn's content, what it writes before a user message's
    content when that message follows one, what after it with the generation prompt); `BackendError` for a
    template that rewrites earlier turns when one is added (the conversation could not be appended to)."""
    turns = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PROBE}]
    head = tokenizer.apply_chat_template(turns, tokenize=False)
    more = [*turns, {"role": "user", "content": _PROBE}]
    full = tokenizer.apply_chat_template(more, add_generation_prompt=True, tokenize=False)
    if not full.startswith(head) or head.count(_PROBE) != 1 or full.count(_PROBE) != 2:
        raise BackendError(_REWRITES)
    closing = head[head.index(_PROBE) + len(_PROBE) :]
    before, after = full[len(head) :].split(_PROBE)
    return closing, before, after


def next_message(tokenizer: PreTrainedTokenizerBase, role: str, text: str) -> str:
    """What the template writes for a `role` message `text` after an assistant turn (and its closing), with
    the generation prompt; `BackendError` for a template that rewrites earlier turns when it is added."""
    turns = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PROBE}]
    head = tokenizer.apply_chat_template(turns, tokenize=False)
    full = tokenizer.apply_chat_template(
        [*turns, {"role": role, "content": text}], add_generation_prompt=True, tokenize=False
    )
    if not full.startswith(head):
        raise BackendError(_REWRITES)
    return full[len(head) :]


class ByteChat:
    """The scripted backend's encoding without a tokenizer: UTF-8 bytes, messages as they are."""

    templated = False

    def appendable(self, role: str = "user") -> None:
        return None

    def first(self, text: str, system: str | None = None, tools: Sequence[dict] = ()) -> list[int]:
        if system is not None or tools:
            raise BackendError("a system message or tools need a chat template: bytes have none")
        return list(text.encode("utf-8"))

    def then(self, text: str, so_far: Sequence[int], role: str = "user") -> list[int]:
        return list(text.encode("utf-8"))
