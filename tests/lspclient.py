"""A tiny LSP client for tests: JSON-RPC with Content-Length framing over a subprocess's stdio."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class LspClient:
    """`python -m srpo_dsl lsp` in a subprocess; requests wait for their response, notifications queue."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "srpo_dsl", "lsp"],
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

    def initialize(self, root: Path) -> dict:
        result = self.request(
            "initialize", {"processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": {}}
        )
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
