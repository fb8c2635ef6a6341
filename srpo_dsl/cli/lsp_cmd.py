"""`srpo-dsl lsp`: the language server, over stdio."""

from __future__ import annotations


def lsp_cmd() -> None:
    """Serve the Language Server Protocol over stdin/stdout, for editors.

    Diagnostics as `validate` reports them, formatting as `fmt` does, document symbols, go to
    definition, hover and completion for *.srpo files. An editor starts it as a process:

      srpo-dsl lsp
    """
    from srpo_dsl.lsp.server import serve

    serve()
