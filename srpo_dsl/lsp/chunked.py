"""Long requests in steps: the features whose work grows with the file (code lens, semantic tokens)
produce their items lazily, and their handlers collect them here, giving the event loop a turn every
`CHUNK` items. In between, an edit's analysis runs and publishes its diagnostics, and a
`$/cancelRequest` cancels the request (pygls cancels its task: it stops at its next turn and the
client gets RequestCancelled)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")
CHUNK = 200  # items between turns of the event loop


async def collect(items: Iterable[T]) -> list[T]:
    """Every item of `items`, the event loop taking a turn every `CHUNK` of them."""
    out: list[T] = []
    for item in items:
        out.append(item)
        if len(out) % CHUNK == 0:
            await asyncio.sleep(0)
    return out
