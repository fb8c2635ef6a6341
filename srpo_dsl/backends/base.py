"""The protocol every generation backend follows: batched requests in, token-level results out."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from srpo_dsl.seeds import seed_of

if TYPE_CHECKING:
    import torch


class BackendError(Exception):
    """A backend failure with a one-line, user-facing message."""


class ChatEncoder(Protocol):
    """What a conversation agent's turns are encoded with (a backend's `chat_encoder()`)."""

    templated: bool  # whether messages go through a chat template (a system message needs one)

    def first(self, text: str, system: str | None = None, tools: Sequence[dict] = ()) -> list[int]:
        """The first turn's prompt ids: `text` as the user message, after the `system` message if any, the
        chat template given `tools` (JSON schemas) when there are any."""
        ...

    def appendable(self, role: str = "user") -> None:
        """`BackendError` where a conversation cannot be appended to (a template that rewrites turns)."""
        ...

    def then(self, text: str, so_far: Sequence[int], role: str = "user") -> list[int]:
        """The ids appended after `so_far` (ending in a sampled reply) for the next message `text`, a
        `user` message or a `tool` one (a tool's result, for a model with native tool calls)."""
        ...


NOT_DOWNLOADED = (
    "not on this machine: a Hugging Face Hub model is downloaded on first use, which needs a connection "
    "and room for its weights; or give a local copy with --model PATH"
)


def load_errors() -> tuple[type[Exception], ...]:
    """What loading a model raises for files that are missing, unreadable or not what they claim to be:
    transformers' OSError and ValueError, and safetensors' error for a truncated or garbage weights file
    (what a failing disk leaves)."""
    from safetensors import SafetensorError

    return (OSError, ValueError, SafetensorError)


def model_load_error(model: str, exc: BaseException) -> BackendError:
    """A model that did not load (one of `load_errors`), in one line naming it, and the weights file that
    safetensors cannot read; for a Hub repo id that is not in this machine's Hugging Face cache, also that
    it is downloaded on first use and how to do without."""
    reason = (str(exc).splitlines() or [type(exc).__name__])[0]
    broken = _unreadable_weights(model) if not isinstance(exc, (OSError, ValueError)) else None
    missing = f" ({NOT_DOWNLOADED})" if _not_downloaded(model) else ""
    return BackendError(f"cannot load model `{model}`: {f'{broken}: ' if broken else ''}{reason}{missing}")


def _unreadable_weights(model: str) -> str | None:
    """The first `*.safetensors` file of the local model folder `model` whose header safetensors cannot
    read (truncated, garbage), or None."""
    from pathlib import Path

    from safetensors import SafetensorError, safe_open

    for path in sorted(Path(model).glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt"):
                pass
        except (SafetensorError, OSError):
            return str(path)
    return None


def _not_downloaded(model: str) -> bool:
    """`model` is a Hub repo id (not a local path) whose config is not in the Hugging Face cache."""
    from pathlib import Path

    from huggingface_hub import try_to_load_from_cache

    if Path(model).exists():
        return False
    try:
        return not isinstance(try_to_load_from_cache(model, "config.json"), str)
    except ValueError:  # not a repo id: a path
        return False


@dataclass(frozen=True)
class GenRequest:
    """One generation: the rendered prompt and its sampling settings.

    `role` lets backends that care (scripted) tell agents apart; `tag` is opaque and
    is for the caller's bookkeeping (results come back in request order). `adapter` names
    the LoRA adapter of a model that hosts several (`hf` with a shared base); others ignore it.
    `seed` fixes the request's own random draw (in the `hf` engine independently of the rest of the
    batch); without one, `generate`'s `seed` gives a default (`request_seeds`). `prompt_ids`, when given,
    are the prompt's token ids as they are (a conversation's, `backends.chat`): the backend generates
    after them and never encodes `prompt`, which is then for the record (and for scripted replies).
    `prefix` marks a conversation's turn: how many of its first prompt ids are its previous turn's prompt
    and reply (0 on its first turn; None: not a conversation), so an engine that kept that turn's KV
    prefills only the rest (`backends.turn_cache`).

    The sampling controls (defaults: off) shape which token is drawn, in this order on the raw logits:
    the penalties, the temperature, `top_k`, `top_p`, the draw. `frequency_penalty` and
    `presence_penalty` subtract `f * count[v] + p * (count[v] > 0)` over the tokens of this response so
    far; `repetition_penalty` divides a positive logit of every token seen in the prompt or the response
    so far by it and multiplies a negative one; `top_k` keeps the k most likely tokens (0: all; ties
    with the k-th kept). `min_tokens`: until that many response tokens are drawn, end-of-sequence
    cannot be drawn and a stop string does not end the turn (one completed by a later token does).
    `stop_strings`: the turn ends at the first stop string in the response text (`finish_reason` "stop"; the
    text ends with it, `backends.stops`). The recorded log-prob of a token stays that of
    `softmax(logits / temperature)` of the raw logits, whatever the controls (docs/objective.md).
    """

    prompt: str
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    role: str = ""
    tag: object = None
    adapter: str | None = None
    seed: int | None = None
    prompt_ids: tuple[int, ...] | None = None
    prefix: int | None = None
    stop_strings: tuple[str, ...] = ()
    top_k: int = 0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0

    def penalties(self) -> tuple[float, float, float]:
        """(frequency, presence, repetition): `PENALTIES_OFF` when none applies."""
        return (self.frequency_penalty, self.presence_penalty, self.repetition_penalty)


PENALTIES_OFF = (0.0, 0.0, 1.0)  # `GenRequest.penalties()` of a request without any


def prompt_ids_of(
    requests: Sequence[GenRequest], encode: Callable[[list[str]], list[list[int]]]
) -> list[list[int]]:
    """Each request's prompt ids: its own `prompt_ids`, else its prompt encoded (one `encode` call for
    all of those)."""
    texts = [r.prompt for r in requests if r.prompt_ids is None]
    encoded = iter(encode(texts) if texts else [])
    return [list(r.prompt_ids) if r.prompt_ids is not None else next(encoded) for r in requests]


def request_seeds(requests: Sequence[GenRequest], seed: int | None) -> list[int | None]:
    """Each request's seed: its own; else, with a call `seed`, `seed_of(seed, i)` for request `i`;
    else None (the backend's own randomness)."""
    return [
        r.seed if r.seed is not None or seed is None else seed_of(seed, i) for i, r in enumerate(requests)
    ]


@dataclass(frozen=True)
class GenResult:
    """One generated response; `logprobs` has one entry per response token; `finish_reason` is one of
    `srpo_dsl.choices.FINISH_REASONS`, and `stop_string` the stop string matched when it is "stop"."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    stop_string: str | None = None


@runtime_checkable
class Backend(Protocol):
    """Generates for a batch of requests; results come back in request order."""

    name: str
    version: int  # policy version, bumped on every weight update

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]: ...


@runtime_checkable
class ChatBackend(Backend, Protocol):
    """A backend that can keep an agent's turns as one conversation (`backends.chat`): it encodes the
    messages, and generates from given prompt ids (`GenRequest.prompt_ids`)."""

    def chat_encoder(self) -> ChatEncoder: ...


@runtime_checkable
class RolloutEngine(Backend, Protocol):
    """A backend the trainer drives through a training step (`hf` and `vllm`).

    The trainer's order, every step: `generate` (awake) -> `sleep()` (release generation
    memory before the update) -> the optimizer step -> `wake_up(("weights",))` ->
    `load_weights(...)` (policy version + 1) -> `wake_up(("kv_cache",))`. `load_weights(None)`
    means the engine generates with the trained module itself: there is nothing to copy.
    `merged_weights` says whether LoRA must come folded into the base weights under the
    base model's names (`vllm`) or as the module's own parameters (`hf`). `pad_id` is the
    token id the trainer pads its rows with (the tokenizer's pad token, else its EOS).
    """

    merged_weights: bool
    pad_id: int

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]] | None = None) -> int: ...

    def sleep(self) -> None: ...

    def wake_up(self, tags: Sequence[str] | None = None) -> None: ...


@runtime_checkable
class KeepsDecodeCaches(Protocol):
    """A rollout engine whose decode loop keeps static caches between calls and compiles per shape (`hf`
    under decode `static` or `compiled`): the trainer caps the caches (`rl.engines.fit.decode_cache_cap`)
    and reports the compiles (`decode/` metrics, `time/compile`)."""

    def decode_stats(self) -> dict[str, float]: ...

    def cap_decode_caches(self, nbytes: float) -> None: ...
