"""Deterministic replies for dry runs and control-flow tests.

The script maps a role name to its replies, e.g. `{"solver": ["\\\\boxed{1}", "\\\\boxed{2}"],
"*": ["ok"]}` (a dict, or a JSON file holding one). Each role cycles through its own list
independently, in request order: the n-th request of role `r` gets reply `n mod len`.
Roles without an entry use `"*"` (still with their own counter); with no `"*"` they are an
error. Tokens are UTF-8 bytes (token id = byte value) with log-prob 0.0, and a reply
longer than `max_tokens` bytes is cut (`finish_reason == "length"`).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from srpo_dsl.backends.base import BackendError, GenRequest, GenResult


def _load_script(script: Path | str | dict[str, list[str]]) -> dict[str, list[str]]:
    if isinstance(script, dict):
        data: object = script
    else:
        try:
            data = json.loads(Path(script).read_text(encoding="utf-8"))
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

    def __init__(self, script: Path | str | dict[str, list[str]]):
        self.script = _load_script(script)
        self.version = 0
        self._served: Counter[str] = Counter()

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        """The next scripted reply of each request's role; no draw, so seeds (the call's and the
        requests') are ignored."""
        return [self._reply(r) for r in requests]

    def _reply(self, request: GenRequest) -> GenResult:
        replies = self.script.get(request.role) or self.script.get("*")
        if replies is None:
            raise BackendError(
                f'the reply script has no entry for role `{request.role}` (and no "*" fallback)'
            )
        reply = replies[self._served[request.role] % len(replies)]
        self._served[request.role] += 1
        response = list(reply.encode("utf-8"))
        finish = "length" if len(response) > request.max_tokens else "stop"
        response = response[: request.max_tokens]
        text = bytes(response).decode("utf-8", errors="ignore")
        return GenResult(list(request.prompt.encode("utf-8")), response, [0.0] * len(response), text, finish)
