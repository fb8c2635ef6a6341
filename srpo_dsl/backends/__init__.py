"""Generation backends (`hf`, `scripted`, `vllm`) behind one protocol, and a factory."""

from __future__ import annotations

from pathlib import Path

from srpo_dsl.backends.base import Backend, BackendError, GenRequest, GenResult

__all__ = ["Backend", "BackendError", "GenRequest", "GenResult", "make_backend", "resolve_model_spec"]

KINDS = ("hf", "scripted", "vllm")
DECODE_MODES = ("auto", "dynamic", "static", "compiled")  # the hf engine's decode loops (`decoding`)


def resolve_model_spec(model: str) -> str:
    """A local path or repo id for `builtin:tiny` (the shipped model), `hf:NAME`, a path or a repo id."""
    from srpo_dsl.models.tiny import resolve_model

    return resolve_model(model.removeprefix("hf:"))


def make_backend(kind: str, model: str, **options: object) -> Backend:
    """The backend `kind` for `model`; for `scripted`, `model` is the reply script (a JSON file)."""
    if kind == "scripted":
        from srpo_dsl.backends.scripted import ScriptedBackend

        return ScriptedBackend(Path(model), **options)  # type: ignore[arg-type]
    if kind == "hf":
        from srpo_dsl.backends.hf import HFBackend

        return HFBackend(resolve_model_spec(model), **options)  # type: ignore[arg-type]
    if kind == "vllm":
        from srpo_dsl.backends.vllm import VLLMBackend

        return VLLMBackend(resolve_model_spec(model), **options)  # type: ignore[arg-type]
    raise BackendError(f"unknown backend `{kind}`: expected one of {', '.join(KINDS)}")
