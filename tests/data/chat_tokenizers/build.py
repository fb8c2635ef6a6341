"""Builds the tokenizer folders beside this file: tokenizer files only, no weights (`python build.py`).

Each folder is a byte-level tokenizer (the 256 bytes, no merges) made with `tokenizers`, with its model's
special tokens added and its model's real chat template: Qwen3's (`qwen3`), Llama 3.1's (`llama3_1`) and
Qwen2.5's, the Hermes tool-call format (`hermes`). The templates are copied from the ones TRL ships
(`trl/chat_templates/`, Apache-2.0), read from the installed package.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
QWEN = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_WORDS = ("<tool_call>", "</tool_call>", "<think>", "</think>")  # added tokens, as Qwen's: not special
LLAMA = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
FOLDERS = {  # folder: (TRL's template, special tokens, other added tokens, bos, eos, pad)
    "qwen3": ("qwen3.jinja", QWEN, QWEN_WORDS, None, "<|im_end|>", "<|endoftext|>"),
    "hermes": ("qwen2_5.jinja", QWEN, QWEN_WORDS, None, "<|im_end|>", "<|endoftext|>"),
    "llama3_1": (
        "llama3_1.jinja",
        (*LLAMA, "<|eom_id|>", "<|python_tag|>"),
        (),
        LLAMA[0],
        "<|eot_id|>",
        None,
    ),
}


def byte_tokenizer(specials: tuple[str, ...], words: tuple[str, ...]) -> Tokenizer:
    """The 256 byte-level symbols as the vocabulary, no merges, then `specials` and `words` as added
    tokens (`words` not special: decoding keeps them)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE({s: i for i, s in enumerate(sorted(alphabet))}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(specials))
    tok.add_tokens(list(words))
    return tok


def build(name: str, out: Path) -> None:
    template, specials, words, bos, eos, pad = FOLDERS[name]
    text = resources.files("trl").joinpath("chat_templates", template).read_text(encoding="utf-8")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=byte_tokenizer(specials, words), bos_token=bos, eos_token=eos, pad_token=pad
    )
    fast.chat_template = text
    fast.save_pretrained(out / name)


if __name__ == "__main__":
    for folder in sys.argv[1:] or FOLDERS:
        build(folder, HERE)
