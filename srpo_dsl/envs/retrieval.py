"""Retrieval tools: BM25 over a local JSONL corpus (bm25s), or a Search-R1 retrieval server.

A corpus line is `{"id": ..., "contents": "\\"Title\\"\\ntext"}` (the Search-R1 / FlashRAG
layout: the first line of `contents` is the title, in quotes) or `{"id", "title", "text"}`.
Both retrievers answer a batch of queries at once: `search(queries, top_k)` returns one
list of documents per query, best first. Each is the `make` of its tool kind in
`srpo_dsl.lang.checks.schema.TOOL_KINDS`, called with the binding's options but `top_k` (path options
resolved): `bm25_retriever(corpus)`, `HttpRetriever(url, timeout, retries)`.
"""

from __future__ import annotations

import http.client
import inspect
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from srpo_dsl.io import loads, not_utf8
from srpo_dsl.lang.checks.schema import TOOL_KINDS


class RetrieverError(Exception):
    """A retriever that cannot be built or cannot serve; the message is one line."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


class Retriever(Protocol):
    def search(self, queries: list[str], top_k: int) -> list[list[Document]]: ...


def to_document(row: dict, default_id: str) -> Document:
    """A corpus record (`contents`, or `title` + `text`) as a Document; KeyError if it has neither."""
    doc_id = str(row.get("id", default_id))
    if "contents" not in row:
        return Document(doc_id, str(row.get("title", "")), str(row["text"]))
    head, newline, body = str(row["contents"]).partition("\n")
    if not newline:
        return Document(doc_id, "", head.strip())
    return Document(doc_id, head.strip().strip('"'), body.strip())


def read_corpus(path: Path) -> list[Document]:
    """Every document of a JSONL corpus; a broken line is a RetrieverError naming it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RetrieverError(f"cannot read corpus {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RetrieverError(f"cannot read corpus {path}: {not_utf8(exc)}") from None
    docs = []
    for i, line in enumerate(lines, 1):
        if line.strip():
            try:
                docs.append(to_document(loads(line), str(i - 1)))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                raise RetrieverError(f"{path}:{i}: not a JSON object with `contents` or `text`") from None
    if not docs:
        raise RetrieverError(f"corpus {path} is empty")
    return docs


class Bm25Retriever:
    """BM25 (bm25s, English stop words) over a local JSONL corpus, indexed once at construction.

    Like the Search-R1 server, every query gets `top_k` documents (fewer only when the
    corpus is smaller), even when few share a term with it. For a corpus of millions of
    passages (the 2018 Wikipedia dump), serve it with a retrieval server and use `HttpRetriever`.
    """

    def __init__(self, corpus_path: Path):
        import bm25s

        self._bm25s = bm25s
        self.docs = read_corpus(Path(corpus_path))
        self.index = bm25s.BM25()
        self.index.index(self._tokens([f"{d.title}\n{d.text}" for d in self.docs]), show_progress=False)

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        return self._bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)

    def search(self, queries: list[str], top_k: int) -> list[list[Document]]:
        if not queries:
            return []
        ids, _ = self.index.retrieve(
            self._tokens(queries), k=min(top_k, len(self.docs)), show_progress=False, n_threads=1
        )
        return [[self.docs[int(i)] for i in row] for row in ids]


class HttpRetriever:
    """Client of a Search-R1 retrieval server (`retrieval_server.py`, POST /retrieve).

    Request `{"queries": [...], "topk": k, "return_scores": true}`; reply
    `{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`, one list per query,
    best first (a hit without `document` is read as the document itself). A URL without a
    path posts to `/retrieve`. Connection failures, time-outs and 5xx replies are retried
    `retries` times with exponential backoff; then, or at once on any other bad reply, a
    RetrieverError.
    """

    def __init__(self, url: str, timeout: float = 10.0, retries: int = 2, backoff: float = 0.5):
        parts = urllib.parse.urlsplit(str(url))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RetrieverError(f"retrieval server url must be http://HOST:PORT[/retrieve], got {url!r}")
        if parts.path in ("", "/"):
            parts = parts._replace(path="/retrieve")
        self.url, self.timeout, self.retries, self.backoff = parts.geturl(), timeout, retries, backoff

    def _post(self, body: bytes) -> object:
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                    return loads(reply.read().decode("utf-8"))  # (not UTF-8: a ValueError)
            except urllib.error.HTTPError as exc:
                failure = f"retrieval server at {self.url} answered HTTP {exc.code}: {exc.reason}"
                if exc.code < 500:
                    raise RetrieverError(failure) from None
            except (OSError, http.client.HTTPException) as exc:  # URLError, refused, reset, timed out
                failure = self._unreachable(exc)
            except ValueError:
                raise RetrieverError(
                    f"retrieval server at {self.url} sent a reply that is not JSON"
                ) from None
        raise RetrieverError(failure + (f" ({self.retries + 1} tries)" if self.retries else ""))

    def _unreachable(self, exc: Exception) -> str:
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, TimeoutError):
            return f"retrieval server at {self.url} did not answer within its timeout, {self.timeout:g} s"
        return f"cannot reach retrieval server at {self.url}: {str(reason) or type(reason).__name__}"

    def search(self, queries: list[str], top_k: int) -> list[list[Document]]:
        if not queries:
            return []
        payload = self._post(json.dumps({"queries": queries, "topk": top_k, "return_scores": True}).encode())
        try:
            result = payload["result"]  # type: ignore[index]
            if len(result) != len(queries):
                raise ValueError(f"{len(result)} result lists for {len(queries)} queries")
            return [
                [to_document(hit.get("document", hit), f"{q}-{j}") for j, hit in enumerate(hits)]
                for q, hits in enumerate(result)
            ]
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise RetrieverError(
                f"retrieval server at {self.url} sent an unexpected reply ({type(exc).__name__}: {exc}); "
                'expected {"result": [[{"document": {"id", "contents"}}, ...], ...]}, one list per query'
            ) from None


def probe_server(url: str, top_k: int = 3, timeout: float = 10.0) -> None:
    """The `http` tool kind's probe: the server answers one query, in time and in shape (no retry)."""
    HttpRetriever(url, timeout, retries=0).search(["srpo-dsl probe"], 1)


@lru_cache(maxsize=4)
def _bm25(path: Path, mtime_ns: int) -> Bm25Retriever:
    return Bm25Retriever(path)


def bm25_retriever(corpus: str | Path) -> Bm25Retriever:
    """BM25 over the corpus file (already resolved against the workflow's folder), indexed once per
    process (again only if the file changes)."""
    path = Path(corpus).resolve()
    if not path.is_file():
        raise RetrieverError(f"cannot read corpus {path}: no such file")
    return _bm25(path, os.stat(path).st_mtime_ns)


def make_retriever(kind: str, **options: object) -> Retriever:
    """The retriever of a workflow's `tool NAME = bm25(corpus = PATH)` or `http(url = URL, timeout = S)`,
    or of a tool kind a plugin registered (`TOOL_KINDS`). `top_k` is the caller's, per search."""
    if kind not in TOOL_KINDS:
        raise RetrieverError(f"unknown retriever `{kind}` (known: {', '.join(TOOL_KINDS)})")
    make = TOOL_KINDS[kind].maker
    params = inspect.signature(make).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        raise RetrieverError(
            f"`{kind}` retriever has no option {', '.join(unknown)} (options: {', '.join(sorted(params))})"
        )
    missing = [p for p, param in params.items() if param.default is param.empty and p not in options]
    if missing:
        raise RetrieverError(f"`{kind}` retriever needs `{missing[0]}`")
    return make(**options)
