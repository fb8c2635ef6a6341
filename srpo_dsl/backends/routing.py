"""Which LoRA adapter each row of the forward in progress goes through, on a model hosting several.

`with routed(names): model(...)` sends row i through adapter `names[i]` (`BASE_ADAPTER`: the
base alone). The LoRA layers that `srpo_dsl.rl.engines.adapters.with_adapters` builds read it. Passing
peft's `adapter_names=` instead also works, but peft then registers a hook on every layer and
walks every module on each forward: about 15% of a small model's forward time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_NAMES: list[list[str] | None] = [None]  # the forward in progress: one adapter name per row, or None


@contextmanager
def routed(names: list[str] | None) -> Iterator[None]:
    """For the block: each row of a forward through its adapter (None: the model as it is)."""
    previous, _NAMES[0] = _NAMES[0], names
    try:
        yield
    finally:
        _NAMES[0] = previous


def current_route() -> list[str] | None:
    return _NAMES[0]
