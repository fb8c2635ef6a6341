"""Every request `srpo-dsl lsp` takes is answered (issue 49): a request whose params do not read as its
method's gets an InvalidParams error with a one-line message, for every request method the server
registers (the table below is made from the registered features, so a new one is covered), and the
server answers a good request afterwards."""

from __future__ import annotations

import json
import time

import pytest
from lsprotocol.types import METHOD_TO_TYPES

from srpo_dsl.lsp.protocol import INVALID_PARAMS
from srpo_dsl.lsp.server import server
from tests.support.clitools import ROOT, load_bench

LspClient = load_bench("lsp_client").LspClient
QUICKSTART = ROOT / "workflows" / "quickstart.srpo"
TIMEOUT = 10.0


def _requests() -> list[str]:
    """The request methods the server registers (a notification has no result type), and executeCommand."""
    found = [m for m in server.protocol.fm.features if METHOD_TO_TYPES[m][1] is not None]
    return sorted(found) + (["workspace/executeCommand"] if server.protocol.fm.commands else [])


def _malformed(uri: str) -> list[tuple[str, object]]:
    """Params no request method takes: null, empty, a document but no position, a negative line, a
    position of the wrong type, a document that is a number."""
    doc = {"uri": uri}
    return [
        ("null params", None),
        ("empty params", {}),
        ("no position", {"textDocument": doc}),
        ("line -1", {"textDocument": doc, "position": {"line": -1, "character": 0}}),
        ("position a string", {"textDocument": doc, "position": "1:1", "newName": 5}),
        ("document a number", {"textDocument": 7, "position": {"line": 0, "character": 0}}),
    ]


def _covers(capabilities: dict, methods: list[str]) -> None:
    """Each `...Provider` the initialize result advertises has its method in `methods` (`hoverProvider`:
    textDocument/hover, `documentFormattingProvider`: textDocument/formatting, ...)."""
    names = [m.split("/")[1].lower() for m in methods]
    for key in capabilities:
        if key.endswith("Provider"):
            stem = key.removesuffix("Provider").lower()
            assert any(stem.endswith(name) for name in names), (
                f"{key} advertised, no method of it in the table"
            )


def _ask(client, rid: int, method: str, params: object) -> dict:
    client.send({"id": rid, "method": method, "params": params})
    return client.receive(lambda m: m.get("id") == rid and "method" not in m, timeout=TIMEOUT)


def test_the_table_covers_what_the_server_advertises():
    methods = _requests()
    for wanted in ("textDocument/hover", "textDocument/rename", "textDocument/codeLens"):
        assert wanted in methods


@pytest.mark.editor
def test_every_malformed_request_is_answered_and_the_server_goes_on():
    client = LspClient()
    try:
        advertised = client.initialize(ROOT)["capabilities"]
        _covers(advertised, _requests())
        uri = client.open(QUICKSTART, QUICKSTART.read_text(encoding="utf-8"))
        client.diagnostics(uri)
        rid = 1000
        for method in _requests():
            for what, params in _malformed(uri):
                rid += 1
                reply = _ask(client, rid, method, params)  # a queue.Empty here: no reply in TIMEOUT
                if "error" in reply:
                    message = reply["error"]["message"]
                    assert message and "\n" not in message, (method, what, reply)
        rename = {"textDocument": {"uri": uri}, "position": {"line": 12, "character": 10}}
        reply = _ask(client, rid + 1, "textDocument/rename", rename)
        assert reply["error"]["code"] == INVALID_PARAMS
        assert "new_name" in reply["error"]["message"]
        hover = client.request(
            "textDocument/hover", {"textDocument": {"uri": uri}, "position": rename["position"]}
        )
        assert hover is not None
    finally:
        client.close()


@pytest.mark.editor
def test_two_megabytes_of_garbage_are_answered_at_once():
    """A body that is not JSON, then a request of 2 MB with nothing it needs: an error in well under a
    second each (the server reads them once), then the server answers (`close` waits for shutdown's reply)."""
    client = LspClient()
    try:
        client.initialize(ROOT)
        start = time.perf_counter()
        body = b"\x00garbage" * 250_000
        client.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        garbage = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "textDocument/hover",
            "params": {"x": "y" * 2_000_000},
        }
        body = json.dumps(garbage).encode()
        client.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        client.proc.stdin.flush()
        reply = client.receive(lambda m: m.get("id") == 7, timeout=TIMEOUT)
        assert reply["error"]["code"] == INVALID_PARAMS
        assert time.perf_counter() - start < 5.0
    finally:
        client.close()


@pytest.mark.editor
@pytest.mark.parametrize("method", ["textDocument/hover", "textDocument/codeLens"])
def test_a_request_on_a_document_never_opened_is_answered(method):
    client = LspClient()
    try:
        client.initialize(ROOT)
        params = {"textDocument": {"uri": "file:///nowhere/x.srpo"}, "position": {"line": 0, "character": 0}}
        reply = _ask(client, 5, method, params)
        assert "result" in reply or reply["error"]["message"]
    finally:
        client.close()


@pytest.mark.editor
def test_two_megabytes_of_garbage_lines_are_passed_over_at_once():
    """A million short lines that are no header (2 MB) between two messages: pygls read them a line
    at a time, a thread hop each (37 s in the issue); they are skipped in one read."""
    client = LspClient()
    try:
        client.initialize(ROOT)
        uri = client.open(QUICKSTART, QUICKSTART.read_text(encoding="utf-8"))
        client.diagnostics(uri)
        start = time.perf_counter()
        client.proc.stdin.write(b"x\n" * 1_000_000)
        symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
        assert symbols and time.perf_counter() - start < 5.0
    finally:
        client.close()
