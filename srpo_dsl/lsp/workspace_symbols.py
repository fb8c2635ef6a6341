"""workspace/symbol: every declaration of the workflows under the workspace root (and the open ones),
those whose name holds the query's characters in order, case aside (an empty query: all)."""

from __future__ import annotations

from collections.abc import Iterable

from lsprotocol import types as lsp

from srpo_dsl.lsp.symbols import declaration_symbols
from srpo_dsl.lsp.workspace_files import WorkspaceFile


def matches(query: str, name: str) -> bool:
    """Whether `name` holds the characters of `query` in order, case aside (`slv` matches `solver`)."""
    rest = iter(name.lower())
    return all(c in rest for c in query.lower())


def workspace_symbols(query: str, found: Iterable[WorkspaceFile]) -> list[lsp.SymbolInformation]:
    """The declarations matching `query` in the workflows `found`, each at its name, in code points."""
    out = []
    for w in found:
        for s in declaration_symbols(w.tree) if w.tree is not None else []:
            if matches(query, s.name):
                where = lsp.Location(uri=w.uri, range=s.selection_range)
                out.append(
                    lsp.SymbolInformation(
                        name=s.name, kind=s.kind, location=where, container_name=w.path.name
                    )
                )
    return out
