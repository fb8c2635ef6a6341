"""The tiny model's tokenizer: a byte-level BPE trained on the warm-up's transcripts.

Digits stay single tokens and `\\boxed{` becomes one. Its chat template (`CHAT_TEMPLATE`) writes BOS, then
every message's content as it is, an assistant's followed by EOS: a one-message prompt is BOS + text, as
the warm-up's transcripts are, and a conversation agent's later turns append their messages' text.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
)


def train_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE over the transcripts; digits stay single tokens, `\\boxed{` becomes one."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", padding_side="left"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
