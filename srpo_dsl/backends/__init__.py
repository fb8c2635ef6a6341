"""Generation backends (`hf`, `scripted`, `vllm`) behind one protocol, and a factory."""

from __future__ import annotations

from pathlib import Path

from srpo_dsl.backends.base import Backend, BackendError, GenRequest, GenResult

__all__ = ["Backend", "BackendError", "GenRequest", "GenResult", "make_backend"]

KINDS = ("hf", "scripted", "vllm")
DECODE_MODES = ("auto", "dynamic", "static", "compiled")  # the hf engine's decode loops (`decoding`)


def make_backend(kind: str, model: str, **options: object) -> Backend:
    """The backend `kind` for `model`, a local path or repo id (`srpo_dsl.models.specs` resolves a
    workflow's specs); for `scripted`, `model` is the reply script (a JSON file)."""
    if kind == "scripted":
        from srpo_dsl.backends.scripted import ScriptedBackend

        return ScriptedBackend(Path(model), **options)  # type: ignore[arg-type]
    if kind == "hf":
        from srpo_dsl.backends.hf import HFBackend

        return HFBackend(model, **options)  # type: ignore[arg-type]
    if kind == "vllm":
        from srpo_dsl.backends.vllm import VLLMBackend

        return VLLMBackend(model, **options)  # type: ignore[arg-type]
    raise BackendError(f"unknown backend `{kind}`: expected one of {', '.join(KINDS)}")
