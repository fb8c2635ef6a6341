"""Generation backends (`hf`, `scripted`, `vllm`) behind one protocol, opened by name.

The backends `run` and `eval` generate with are the entries of `srpo_dsl.registries.BACKENDS`
(`BackendKind`): a factory `open(model, **options) -> Backend`, where `model` is a local path or repo id
(`srpo_dsl.models.specs.resolve_model_spec`) or, for a backend that replays a script (`scripted`), the
reply script (a JSON file), and the options it takes. `BACKENDS.add(name, BackendKind(...))` adds one.
"""

from __future__ import annotations

from pathlib import Path

from srpo_dsl.backends.base import Backend, BackendError, GenRequest, GenResult
from srpo_dsl.registries import BACKENDS

__all__ = ["Backend", "BackendError", "GenRequest", "GenResult", "make_backend"]


def open_hf(model: str, **options: object) -> Backend:
    from srpo_dsl.backends.hf import HFBackend

    return HFBackend(model, **options)  # type: ignore[arg-type]


def open_scripted(model: str, **options: object) -> Backend:
    from srpo_dsl.backends.scripted import ScriptedBackend

    return ScriptedBackend(Path(model), **options)  # type: ignore[arg-type]


def open_vllm(model: str, **options: object) -> Backend:
    from srpo_dsl.backends.vllm import VLLMBackend

    return VLLMBackend(model, **options)  # type: ignore[arg-type]


def make_backend(kind: str, model: str, **options: object) -> Backend:
    """The backend `kind` (`BACKENDS`) for `model`, a local path or repo id (`srpo_dsl.models.specs`
    resolves a workflow's specs); for `scripted`, `model` is the reply script (a JSON file)."""
    if kind not in BACKENDS:
        raise BackendError(f"unknown backend `{kind}`: expected one of {', '.join(BACKENDS)}")
    return BACKENDS[kind].make(model, **options)
