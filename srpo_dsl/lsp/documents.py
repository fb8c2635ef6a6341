"""The open documents' analyses: one per burst of edits, the last good one kept for requests.

Edits are coalesced: a change (re)starts its document's timer, and the document is analysed
`SETTLE` seconds (10 ms) after the last change of a burst, reading its text as it is then. Keystrokes, or
the changes an editor sends at once or that queued while an analysis ran, are analysed once. A
request on a document whose analysis is due analyses it first, so no answer comes from an older
text than the one the request is about.

Each analysis records the text it read and, when that text parsed, its syntax tree and graph
(`view.Good`): requests answer from the last of these while the text has a syntax error (`view`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from srpo_dsl.lsp.view import Good, View

# Seconds without a change before a changed document is analysed. It counts toward an edit's
# diagnostics, so it is only as long as a burst's gaps: the changes an editor sends at once reach the
# server back to back (each message a few turns of the event loop, well under a millisecond apart on
# an idle machine), and those that queue while an analysis runs are all read before the timer fires.
SETTLE = 0.01


@dataclass
class Documents:
    """`analysed`: the text each document's last analysis read; `good`: its last text that parsed;
    `due`: the timers of the analyses to come."""

    analysed: dict[str, str] = field(default_factory=dict)
    good: dict[str, Good] = field(default_factory=dict)
    due: dict[str, asyncio.TimerHandle] = field(default_factory=dict)

    def changed(self, uri: str, analyse: Callable[[], None]) -> None:
        """`uri` changed: call `analyse` once no change has come for `SETTLE` seconds."""
        self._cancel(uri)
        self.due[uri] = asyncio.get_running_loop().call_later(SETTLE, analyse)

    def record(self, uri: str, text: str, good: Good | None) -> None:
        """An analysis of `text` ran (`good`: its tree and graph when it parsed); none is due now."""
        self._cancel(uri)
        self.analysed[uri] = text
        if good is not None:
            self.good[uri] = good

    def stale(self, uri: str, text: str) -> bool:
        """Whether `text` has not been analysed yet (an analysis is due, or the document is new)."""
        return self.analysed.get(uri) != text

    def view(self, uri: str, text: str) -> View | None:
        """What a request on `text` answers from; None before any text of `uri` has parsed."""
        good = self.good.get(uri)
        return View.of(good, text) if good is not None else None

    def forget(self, uri: str) -> None:
        self._cancel(uri)
        self.analysed.pop(uri, None)
        self.good.pop(uri, None)

    def _cancel(self, uri: str) -> None:
        timer = self.due.pop(uri, None)
        if timer is not None:
            timer.cancel()
