"""Which model each policy loads: a workflow's or `--model`'s spec as a local path or repo id.

A spec is `builtin:tiny` (the embedded model, `tiny.py`: the shipped folder, built on first
use where it is missing), `hf:NAME` (a Hugging Face repo id or path, said explicitly), a
local path or a repo id. Resolving lives here, above the backends: they load what they are
given. It imports neither torch nor transformers unless `builtin:tiny` has to be built.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from srpo_dsl.errors import UsageError
from srpo_dsl.lang.compile.graph import EventGraph
from srpo_dsl.models.tiny import MARKER, SHIPPED, TINY_MODEL_ID, ensure_tiny_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def resolve_model_spec(model: str) -> str:
    """A local path or repo id for `builtin:tiny`, `hf:NAME`, a path or a repo id; a `UsageError` for a
    path that is not there (a spec that cannot be a repo id: nothing would be downloaded)."""
    spec = model.removeprefix("hf:")
    if spec == TINY_MODEL_ID:
        return str(ensure_tiny_model())
    if not Path(spec).exists() and not _repo_id(spec):
        raise UsageError(
            f"model `{model}`: no such file or folder "
            "(a path, not a Hugging Face repo id: nothing is downloaded)"
        )
    return spec


def _repo_id(spec: str) -> bool:
    """`spec` may name a Hugging Face repo (`NAME` or `OWNER/NAME`, the hub's own rule)."""
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(spec)
    except ValueError:
        return False
    return True


def policy_models(graph: EventGraph, overrides: Mapping[str, str], resolve: bool = True) -> dict[str, str]:
    """Each policy that loads a model of its own -> that model: its override, else the workflow's,
    resolved (`resolve=False`: as given, e.g. the `scripted` backend's reply script). Every policy loads
    one but an adapter without an override: it generates with its base's model."""
    policies = graph.policies
    own = {n: overrides.get(n, p.model) for n, p in policies.items() if p.base is None or n in overrides}
    return {n: resolve_model_spec(m) for n, m in own.items()} if resolve else own


def local_tokenizer(model: str) -> str | None:
    """Where the tokenizer of a workflow's model spec is on this machine, or None: `builtin:tiny` (the
    shipped folder), a local folder holding one, or a repo id in the Hugging Face cache. Nothing is
    downloaded or built (the scripted backend counts its tokens where it is here, else bytes)."""
    spec = model.removeprefix("hf:")
    if spec == TINY_MODEL_ID:
        return str(SHIPPED) if (SHIPPED / MARKER).exists() else None
    if Path(spec).is_dir():
        return spec if any((Path(spec) / f).is_file() for f in TOKENIZER_FILES) else None
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(spec, "tokenizer_config.json")
    except ValueError:  # not a repo id
        return None
    return spec if isinstance(found, str) else None
