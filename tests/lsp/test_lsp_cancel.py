"""Long requests give way (issue 49): code lens and semantic tokens are produced lazily and collected by
`srpo_dsl.lsp.chunked`, which gives the event loop a turn every `CHUNK` items: an edit's analysis runs in
between and a `$/cancelRequest` cancels them at their next turn.

The mechanism is tested on the event loop itself (deterministic: a cancel or another task is seen at the
next turn, whatever the machine's load); over stdio, a cancelled request gets its result or the
cancellation (both are the protocol's answers, which one depends on when the cancel is read) and the
server goes on answering. A test that required the cancellation to win the race failed under load."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from srpo_dsl.lsp import server
from srpo_dsl.lsp.chunked import CHUNK, collect
from tests.support.clitools import ROOT, load_bench

LspClient = load_bench("lsp_client").LspClient
scale = load_bench("lsp_scale")
CANCELLED = -32800
LONG = ("textDocument/codeLens", "textDocument/semanticTokens/full")


def counted(n: int, taken: list[int]):
    """n items, `taken[0]` counting those produced."""
    for i in range(n):
        taken[0] += 1
        yield i


def test_another_task_runs_between_chunks():
    """While 10 chunks are collected, a task scheduled beside them (an edit's analysis) runs at the first
    turn, after one chunk, not after all ten."""
    taken, seen = [0], []

    async def beside() -> None:
        seen.append(taken[0])

    async def both() -> list[int]:
        long = asyncio.ensure_future(collect(counted(10 * CHUNK, taken)))
        other = asyncio.ensure_future(beside())
        await asyncio.gather(long, other)
        return long.result()

    assert len(asyncio.run(both())) == 10 * CHUNK
    assert seen == [CHUNK]


def test_a_cancel_stops_the_collection_at_its_next_turn():
    taken = [0]

    async def cancelled() -> None:
        task = asyncio.ensure_future(collect(counted(100 * CHUNK, taken)))
        await asyncio.sleep(0)  # the task takes its first chunk
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert CHUNK <= taken[0] <= 2 * CHUNK + 1  # not the 100 chunks


@pytest.mark.parametrize("method", LONG)
def test_the_long_features_are_collected_in_chunks(method):
    """Their handlers are coroutines that go through `collect` (a plain function would hold the loop)."""
    handler = {"textDocument/codeLens": server._lenses, "textDocument/semanticTokens/full": server._semantic}[
        method
    ]
    assert method in server.server.protocol.fm.features
    assert inspect.iscoroutinefunction(handler) and "await collect(" in inspect.getsource(handler)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A server with a 5,000-line workflow open."""
    folder = tmp_path_factory.mktemp("big")
    path = folder / "big.srpo"
    text = scale.workflow(5_000)
    path.write_text(text, encoding="utf-8")
    (folder / "quickstart").symlink_to(ROOT / "workflows" / "quickstart")
    client = LspClient()
    try:
        client.initialize(folder)
        uri = client.open(path, text)
        assert client.diagnostics(uri) == []
        yield client, uri
    finally:
        client.close()


@pytest.mark.editor
@pytest.mark.slow
@pytest.mark.parametrize("method", LONG)
def test_a_cancelled_request_is_answered_and_the_server_goes_on(big, method):
    client, uri = big
    rid = 7000 + LONG.index(method)
    client.send({"id": rid, "method": method, "params": {"textDocument": {"uri": uri}}})
    client.notify("$/cancelRequest", {"id": rid})
    reply = client.receive(lambda m: m.get("id") == rid and "method" not in m)
    assert "result" in reply or reply["error"]["code"] == CANCELLED, str(reply)[:300]
    lenses = client.request("textDocument/codeLens", {"textDocument": {"uri": uri}})
    assert len(lenses) > 1_000  # uncancelled, it answers in full
