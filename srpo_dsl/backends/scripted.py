"""Deterministic replies for dry runs and control-flow tests.

The script maps a role name to its replies, e.g. `{"solver": ["\\\\boxed{1}", "\\\\boxed{2}"],
"*": ["ok"]}` (a dict, or a JSON file holding one). Each role cycles through its own list
independently, in request order: the n-th request of role `r` gets reply `n mod len`.
Roles without an entry use `"*"` (still with their own counter); with no `"*"` they are an
error, which `check_roles` finds before a run starts. Tokens are those of `tokenizer` when one is
given (the policy's own, where it is on this machine: `srpo_dsl.models.specs.local_tokenizer`), else
UTF-8 bytes (token id = byte value); each with log-prob 0.0. A whole reply finishes with "eos" (no
end-of-sequence token is added). A reply that holds one of the request's stop strings is cut after it
as the `hf` engine cuts one (`stops.match`, tokens counted in the script's unit, `min_tokens` too):
`finish_reason == "stop"` and the stop string in `stop_string`. A reply longer than `max_tokens`
tokens (and not stopped before) is cut there (`finish_reason == "length"`) and counted in `cut`, which
the caller reports once per run. The other sampling controls (temperature, top-p, top-k, penalties)
change nothing: a scripted reply is not drawn from a distribution.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from srpo_dsl.backends.base import BackendError, ChatEncoder, GenRequest, GenResult
from srpo_dsl.backends.chat import ByteChat, TokenizerChat
from srpo_dsl.backends.stops import match
from srpo_dsl.io import not_utf8

if TYPE_CHECKING:  # transformers loads with a tokenizer
    from transformers import PreTrainedTokenizerBase


def _load_script(script: Path | str | dict[str, list[str]]) -> dict[str, list[str]]:
    if isinstance(script, dict):
        data: object = script
    else:
        try:
            data = json.loads(Path(script).read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise BackendError(f"cannot read the reply script `{script}`: {not_utf8(exc)}") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise BackendError(f"cannot read the reply script `{script}`: {exc}") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, list) and v and all(isinstance(x, str) for x in v) for v in data.values()
    ):
        raise BackendError(
            'a reply script maps role names to non-empty lists of strings: {"role": ["reply", ...]}'
        )
    return data


class ScriptedBackend:
    """Replies from a script, cycling per role; no model involved."""

    name = "scripted"

    def __init__(self, script: Path | str | dict[str, list[str]], tokenizer: str | Path | None = None):
        self.script = _load_script(script)
        self.source = "the reply script" if isinstance(script, dict) else f"the reply script `{script}`"
        self.version = 0
        self._served: Counter[str] = Counter()
        self.cut = 0  # replies cut at their request's max_tokens
        self.tokenizer = _load_tokenizer(tokenizer) if tokenizer is not None else None
        self.unit = f"{Path(str(tokenizer)).name}'s tokens" if self.tokenizer is not None else "UTF-8 bytes"

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        """The next scripted reply of each request's role; no draw, so seeds (the call's and the
        requests') are ignored."""
        return [self._reply(r) for r in requests]

    def check_roles(self, roles: Iterable[str]) -> None:
        """`BackendError` naming the script and the first of `roles` it has no replies for."""
        for role in roles:
            if role not in self.script and "*" not in self.script:
                raise BackendError(f'{self.source} has no entry for role `{role}` (and no "*" fallback)')

    def _reply(self, request: GenRequest) -> GenResult:
        self.check_roles([request.role])
        replies = self.script.get(request.role) or self.script["*"]
        reply = replies[self._served[request.role] % len(replies)]
        self._served[request.role] += 1
        whole = self._encode(reply)
        response = whole[: request.max_tokens]
        found = match(self._decode, response, request.stop_strings, request.min_tokens)
        prompt = list(request.prompt_ids) if request.prompt_ids is not None else self._encode(request.prompt)
        if found is not None:
            kept = response[: found.tokens]
            return GenResult(prompt, kept, [0.0] * len(kept), found.text, "stop", found.stop)
        finish = "length" if len(whole) > request.max_tokens else "eos"
        self.cut += finish == "length"
        return GenResult(prompt, response, [0.0] * len(response), self._decode(response), finish)

    def chat_encoder(self) -> ChatEncoder:
        """A conversation's encoding: the tokenizer's (its chat template, if it has one), else bytes."""
        if self.tokenizer is None:
            return ByteChat()
        eos = {self.tokenizer.eos_token_id} - {None}
        return TokenizerChat(self.tokenizer, bool(self.tokenizer.chat_template), eos)

    def _encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            return list(text.encode("utf-8"))
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return bytes(ids).decode("utf-8", errors="ignore")
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def _load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer in a local folder (or the Hugging Face cache); nothing is downloaded."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise BackendError(f"cannot load the tokenizer of {path} for the scripted backend: {exc}") from None
