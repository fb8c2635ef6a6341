"""A JSON-RPC client over the stdio of `python -m srpo_dsl lsp` (Content-Length framing), as an editor
speaks to the server: this checkout's server, started in a subprocess. bench/lsp_bench.py and
bench/lsp_scale.py time the server with it; the language server's tests drive it with it
(tests/conftest.py's `client`). It imports nothing from bench/ or tests/."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, "-m", "srpo_dsl", "lsp"]  # this checkout's, with PYTHONPATH=ROOT


class LspClient:
    """`python -m srpo_dsl lsp ARGS` in a subprocess (started by `prefix`, e.g. a command that drops
    privileges); requests wait for their response, notifications and the server's requests queue."""

    def __init__(self, args: Sequence[str] = (), prefix: Sequence[str] = ()) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "srpo_dsl", "lsp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        self.inbox: queue.Queue[dict] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            headers = {}
            while (line := out.readline()) not in (b"\r\n", b""):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            if not line:
                return
            self.inbox.put(json.loads(out.read(int(headers["content-length"]))))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def receive(self, wanted, timeout: float = 30.0) -> dict:
        """The first message `wanted(message)` accepts; the others in between are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.inbox.get(timeout=max(deadline - time.monotonic(), 0.01))
            if wanted(message):
                return message

    def request(self, method: str, params: dict | None) -> object:
        self.next_id += 1
        rid = self.next_id
        self.send({"id": rid, "method": method, "params": params})
        reply = self.receive(lambda m: m.get("id") == rid and "method" not in m)
        assert "error" not in reply, reply
        return reply["result"]

    def diagnostics(self, uri: str) -> list[dict]:
        """The next diagnostics published for `uri`."""
        note = self.receive(
            lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri
        )
        return note["params"]["diagnostics"]

    def reply(self, request: dict, result: object = None) -> None:
        """Answer a request the server sent."""
        self.send({"id": request["id"], "result": result})

    def initialize(self, root: Path, capabilities: dict | None = None) -> dict:
        params = {"processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": capabilities or {}}
        result = self.request("initialize", params)
        self.notify("initialized", {})
        return result

    def open(self, path: Path, text: str) -> str:
        uri = path.resolve().as_uri()
        item = {"uri": uri, "languageId": "srpo", "version": 1, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": item})
        return uri

    def replace(self, uri: str, text: str, version: int) -> None:
        """didChange with the whole new text."""
        doc = {"uri": uri, "version": version}
        self.notify("textDocument/didChange", {"textDocument": doc, "contentChanges": [{"text": text}]})

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.stdin.close()
            self.proc.stdout.close()
