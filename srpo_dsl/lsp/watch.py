"""Diagnostics that follow the files a workflow reads: its templates and its Python change on disk while
the workflow stays open, and what `validate` says of it changes with them.

Each analysis records the paths it looked at and their states (`lang.usercode.filestate`). The server asks a
client that offers it to report changes to those kinds of files (`workspace/didChangeWatchedFiles`);
on a report every open workflow is analysed again. In any case, every `poll` seconds the recorded
paths are looked at again (`os.stat` only) and a workflow whose files changed is analysed again: a
client reports neither a folder's permissions nor files outside its workspace, and some clients
report nothing."""

from __future__ import annotations

from dataclasses import dataclass, field

from lsprotocol import types as lsp

from srpo_dsl.lang.usercode.filestate import Reads, unchanged

# What analysis reads besides the workflow: templates (Jinja2's usual names) and the user's Python.
# Data files are read by runs only, never by a check. A template of another name is caught by the poll.
WATCHED = ("**/*.j2", "**/*.jinja", "**/*.jinja2", "**/*.py")


def offers_watching(capabilities: lsp.ClientCapabilities) -> bool:
    """The client lets the server register for `workspace/didChangeWatchedFiles` after initialization."""
    workspace = capabilities.workspace
    watched = workspace.did_change_watched_files if workspace is not None else None
    return bool(watched is not None and watched.dynamic_registration)


def registration() -> lsp.RegistrationParams:
    """The request that asks the client to report created, changed and deleted files of `WATCHED`."""
    options = lsp.DidChangeWatchedFilesRegistrationOptions(
        watchers=[lsp.FileSystemWatcher(glob_pattern=pattern) for pattern in WATCHED]
    )
    watch = lsp.Registration(
        id="srpo-dsl-watched-files", method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES, register_options=options
    )
    return lsp.RegistrationParams(registrations=[watch])


@dataclass
class OpenWorkflows:
    """Each open workflow's last analysis: the paths it looked at (with their states) and the
    diagnostics published; `poll`: seconds between looks at those paths (0: never; `srpo-dsl lsp
    --poll` sets it)."""

    poll: float = 0.0
    reads: dict[str, Reads] = field(default_factory=dict)
    published: dict[str, list[lsp.Diagnostic]] = field(default_factory=dict)

    def analysed(self, uri: str, reads: Reads, diagnostics: list[lsp.Diagnostic]) -> bool:
        """Record an analysis of `uri`; whether its diagnostics differ from those last published."""
        self.reads[uri] = reads
        changed = self.published.get(uri) != diagnostics
        self.published[uri] = diagnostics
        return changed

    def forget(self, uri: str) -> None:
        self.reads.pop(uri, None)
        self.published.pop(uri, None)

    def uris(self) -> list[str]:
        return list(self.reads)

    def stale(self) -> list[str]:
        """The workflows a path of whose analysis changed (or was written too recently to tell)."""
        return [uri for uri, reads in self.reads.items() if not unchanged(reads)]
