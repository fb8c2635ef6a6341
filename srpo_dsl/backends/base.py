"""The protocol every generation backend follows: batched requests in, token-level results out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class BackendError(Exception):
    """A backend failure with a one-line, user-facing message."""


@dataclass(frozen=True)
class GenRequest:
    """One generation: the rendered prompt and its sampling settings.

    `role` lets backends that care (scripted) tell agents apart; `tag` is opaque and
    is for the caller's bookkeeping (results come back in request order). `adapter` names
    the LoRA adapter of a model that hosts several (`hf` with a shared base); others ignore it.
    """

    prompt: str
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    role: str = ""
    tag: object = None
    adapter: str | None = None


@dataclass(frozen=True)
class GenResult:
    """One generated response; `logprobs` has one entry per response token."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" (end of sequence) or "length" (max_tokens reached)


@runtime_checkable
class Backend(Protocol):
    """Generates for a batch of requests; results come back in request order."""

    name: str
    version: int  # policy version, bumped on every weight update

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]: ...
