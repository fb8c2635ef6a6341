"""Long requests give way (issue 49): code lens and semantic tokens on a big workflow take the event
loop in steps (`srpo_dsl.lsp.chunked`), so a `$/cancelRequest` sent after them cancels them and an
edit's diagnostics are published before they answer."""

from __future__ import annotations

import pytest

from tests.clitools import ROOT, load_bench

LspClient = load_bench("lsp_bench").LspClient
scale = load_bench("lsp_scale")
CANCELLED = -32800
LONG = ("textDocument/codeLens", "textDocument/semanticTokens/full")


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A server with a 20,000-line workflow open (its lenses take half a second and more: far longer
    than an edit takes to reach the server and settle, 20 ms, on a loaded machine too)."""
    folder = tmp_path_factory.mktemp("big")
    path = folder / "big.srpo"
    text = scale.workflow(20_000)
    path.write_text(text, encoding="utf-8")
    (folder / "quickstart").symlink_to(ROOT / "workflows" / "quickstart")
    client = LspClient()
    try:
        client.initialize(folder)
        uri = client.open(path, text)
        assert client.diagnostics(uri) == []
        yield client, uri, text
    finally:
        client.close()


def _reply(client, rid: int) -> dict:
    return client.receive(lambda m: m.get("id") == rid and "method" not in m)


@pytest.mark.slow
@pytest.mark.parametrize("method", LONG)
def test_a_long_request_is_cancelled(big, method):
    client, uri, _ = big
    rid = 7000 + LONG.index(method)
    client.send({"id": rid, "method": method, "params": {"textDocument": {"uri": uri}}})
    client.notify("$/cancelRequest", {"id": rid})
    reply = _reply(client, rid)
    assert reply.get("error", {}).get("code") == CANCELLED, str(reply)[:300]
    lenses = client.request("textDocument/codeLens", {"textDocument": {"uri": uri}})
    assert len(lenses) > 10_000  # uncancelled, it answers in full


@pytest.mark.slow
def test_an_edit_is_diagnosed_while_the_lenses_are_worked_out(big):
    client, uri, text = big
    order = []
    client.send({"id": 7100, "method": "textDocument/codeLens", "params": {"textDocument": {"uri": uri}}})
    client.replace(uri, text.replace("verify verifier\n", "verify verifer\n", 1), 50)
    while len(order) < 2:
        message = client.receive(
            lambda m: m.get("id") == 7100 or m.get("method") == "textDocument/publishDiagnostics"
        )
        order.append("lenses" if message.get("id") == 7100 else f"diagnostics {message['params']['version']}")
    assert order == ["diagnostics 50", "lenses"]
