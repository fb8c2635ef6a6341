"""`srpo-dsl lsp`: the language server, over stdio."""

from __future__ import annotations

import typer


def lsp_cmd(
    stdio: bool = typer.Option(
        False,
        "--stdio",
        help="Speak over stdin/stdout: what the server always does. Accepted because language "
        "clients (VS Code's vscode-languageclient) append it when they start a server over stdio.",
    ),
    poll: float = typer.Option(
        1.0,
        "--poll",
        min=0,
        help="Seconds between looks at the files the open workflows read (templates, Python); 0: never.",
    ),
) -> None:
    """Serve the Language Server Protocol over stdin/stdout, for editors.

    Diagnostics as `validate` reports them, formatting as `fmt` does, document symbols, go to
    definition, hover and completion for *.srpo files. Diagnostics follow the templates and Python
    files a workflow reads as they change on disk (the client's file events, and a look every
    --poll seconds). An editor starts it as a process:

      srpo-dsl lsp            (or `srpo-dsl lsp --stdio`, the same)
    """
    del stdio  # stdio is the only transport: the flag changes nothing
    from srpo_dsl.lsp.server import serve

    serve(poll)
