"""A Search-R1 retrieval server for tests: `POST /retrieve` on 127.0.0.1 (a free port), answering
from a Bm25Retriever; or misbehaving as servers do: failing its first requests (or those after the
first few) with an HTTP status (503, 500, ...), answering late (`delay` seconds), or sending a fixed
reply (garbage, or JSON of the wrong shape)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from srpo_dsl.envs.retrieval import Bm25Retriever


class RetrievalServer:
    """A Search-R1 retrieval server on 127.0.0.1 (free port) answering from a Bm25Retriever."""

    def __init__(
        self,
        retriever: Bm25Retriever,
        fail_first: int = 0,
        status: int = 503,
        reply: bytes | None = None,
        delay: float = 0.0,
        fail_after: int | None = None,
    ):
        self.requests: list[dict] = []
        self.calls: list[tuple[str, str, str]] = []  # (method, path, content type)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.calls.append((self.command, self.path, self.headers["Content-Type"]))
                n = len(outer.requests)
                if n <= fail_first or (fail_after is not None and n > fail_after):
                    self.send_error(status)
                    return
                time.sleep(delay)
                found = retriever.search(body["queries"], body["topk"])
                payload = (
                    reply
                    if reply is not None
                    else json.dumps(
                        {
                            "result": [
                                [
                                    {
                                        "document": {"id": d.id, "contents": f'"{d.title}"\n{d.text}'},
                                        "score": 1.0,
                                    }
                                    for d in docs
                                ]
                                for docs in found
                            ]
                        }
                    ).encode()
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/retrieve"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> RetrievalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
