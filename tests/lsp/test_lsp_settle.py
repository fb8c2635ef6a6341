"""The wait between an edit and its analysis (`documents.SETTLE`): short, since it counts toward the
edit's diagnostics, and a burst of changes within it is analysed once."""

from __future__ import annotations

import asyncio

from srpo_dsl.lsp.documents import SETTLE, Documents


def test_an_edit_waits_at_most_10_ms_before_its_analysis():
    """The goal is 150 ms from an edit to its diagnostics at 5,000 lines: the wait leaves the rest to
    the analysis (it was 20 ms)."""

    async def due_in() -> float:
        docs = Documents()
        docs.changed("file:///w.srpo", lambda: None)
        timer = docs.due["file:///w.srpo"]
        left = timer.when() - asyncio.get_running_loop().time()
        timer.cancel()
        return left

    assert SETTLE <= 0.01
    assert asyncio.run(due_in()) <= 0.01


def test_changes_within_the_wait_are_analysed_once_on_the_last_text():
    async def burst() -> list[str]:
        docs, document, analysed = Documents(), {"text": ""}, []
        for i in range(20):
            document["text"] = f"text {i}"  # the analysis reads the text as it is when it runs
            docs.changed("file:///w.srpo", lambda: analysed.append(document["text"]))
            await asyncio.sleep(0)  # a turn of the loop between two messages, as the server reads them
        await asyncio.sleep(3 * SETTLE)
        return analysed

    assert asyncio.run(burst()) == ["text 19"]
