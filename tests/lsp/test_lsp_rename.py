"""Rename that cannot break a workflow (issue 49, part 4): refusals with a message, a tool's actions
renamed with it, a template renamed across the workspace with its file, workspace symbols and
references across the workspace; and the property that a rename the server offers leaves every
shipped workflow's diagnostics as they were."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from srpo_dsl.lsp.diagnostics import diagnose
from srpo_dsl.lsp.occurrences import declarations, occurrences
from srpo_dsl.lsp.rename import Refused, rename
from srpo_dsl.lsp.symbols import parsed
from srpo_dsl.lsp.workspace_files import workflow_paths
from tests.support.clitools import ROOT, load_bench

LspClient = load_bench("lsp_client").LspClient
FILES = {"workspaceEdit": {"documentChanges": True, "resourceOperations": ["rename"]}}


def reply(client, method: str, params: dict) -> dict:
    """The whole reply to a request: its `result`, or its `error`."""
    client.next_id += 1
    rid = client.next_id
    client.send({"id": rid, "method": method, "params": params})
    return client.receive(lambda m: m.get("id") == rid and "method" not in m)


def at(uri: str, text: str, line_has: str, word: str) -> dict:
    lines = text.splitlines()
    line = next(i for i, x in enumerate(lines) if line_has in x)
    return {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": lines[line].index(word) + 1},
    }


def applied(text: str, edits) -> str:
    """`text` with every edit (LSP dicts or TextEdits, none overlapping) made."""
    lines = text.split("\n")
    for e in sorted(edits, key=lambda e: _start(e), reverse=True):
        (sl, sc), (el, ec), new = _start(e), _end(e), e["newText"] if isinstance(e, dict) else e.new_text
        lines[sl : el + 1] = (lines[sl][:sc] + new + lines[el][ec:]).split("\n")
    return "\n".join(lines)


def _start(e) -> tuple[int, int]:
    r = e["range"]["start"] if isinstance(e, dict) else e.range.start
    return (r["line"], r["character"]) if isinstance(r, dict) else (r.line, r.character)


def _end(e) -> tuple[int, int]:
    r = e["range"]["end"] if isinstance(e, dict) else e.range.end
    return (r["line"], r["character"]) if isinstance(r, dict) else (r.line, r.character)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A copy of the shipped workflows, their templates and Python: renames may move files in it."""
    shutil.copytree(ROOT / "workflows", tmp_path / "workflows")
    return tmp_path / "workflows"


@pytest.mark.editor
def test_rename_refused_with_a_message(client):
    path = ROOT / "workflows" / "search_r1.srpo"
    text = path.read_text()
    uri = client.open(path, text)
    tool = at(uri, text, "tool search", "search")
    for new, says in [
        ("lm", "already declared (the policy on line 11)"),
        ("researcher", "already declared (the agent"),
        ("repeat", "keyword"),
        ("act", "keyword"),
        ("two words", "not a name"),
        ("9lives", "not a name"),
        ("answer", "already written on line 15"),  # act(search, answer): the actions would merge
        ("exact_match", "built-in reward"),
    ]:
        got = reply(client, "textDocument/rename", {**tool, "newName": new})
        assert got["error"]["code"] == lsp.LSPErrorCodes.RequestFailed, (new, got)
        assert says in got["error"]["message"], (new, got)
    assert client.request("textDocument/prepareRename", tool)["placeholder"] == "search"


def test_a_refusal_is_no_traceback_in_the_servers_log(caplog):
    try:
        raise Refused("`lm` is already declared")
    except Refused:
        logging.getLogger("pygls.protocol.json_rpc").exception('Exception occurred for message "2"')
    assert caplog.records == []


@pytest.mark.editor
def test_a_tool_is_renamed_in_its_actions(client):
    path = ROOT / "workflows" / "search_r1.srpo"
    text = path.read_text()
    uri = client.open(path, text)
    edit = client.request(
        "textDocument/rename", {**at(uri, text, "tool search", "search"), "newName": "lookup"}
    )
    renamed = applied(text, edit["changes"][uri])
    assert "tool lookup =" in renamed and "act(lookup, answer)" in renamed and "call lookup on" in renamed
    assert '"</search>"' in renamed  # a string is no name
    assert [d.code for d in diagnose(renamed, str(path))[0]] == []


def _user(folder: Path, name: str, template: str) -> Path:
    """A second workflow in `folder` whose agent reads `template`."""
    text = (ROOT / "workflows" / "quickstart_tools.srpo").read_text()
    path = folder / name
    path.write_text(text.replace("quickstart_tools/solver.j2", template), encoding="utf-8")
    return path


@pytest.mark.editor
def test_a_template_is_renamed_in_every_workflow_and_on_disk(workspace):
    first = workspace / "quickstart_tools.srpo"
    text = first.read_text()
    c = LspClient()
    try:
        c.initialize(workspace, {"workspace": FILES})
        uri = c.open(first, text)
        where = at(uri, text, "agent solver", "quickstart_tools/solver")
        edit = c.request("textDocument/rename", {**where, "newName": "quickstart_tools/worker.j2"})
        refs = c.request("textDocument/references", {**where, "context": {"includeDeclaration": True}})
    finally:
        c.close()
    *changes, moved = edit["documentChanges"]
    users = {"quickstart_stop.srpo", "quickstart_tools.srpo", "quickstart_tools_chat.srpo"}
    assert {Path(ch["textDocument"]["uri"]).name for ch in changes} == users
    assert {Path(r["uri"]).name for r in refs} == users
    old = workspace / "quickstart_tools" / "solver.j2"
    assert moved == {"kind": "rename", "oldUri": old.as_uri(), "newUri": old.with_name("worker.j2").as_uri()}
    for ch in changes:
        path = Path(ch["textDocument"]["uri"][len("file://") :])
        assert '"quickstart_tools/worker.j2"' in applied(path.read_text(), ch["edits"])


@pytest.mark.editor
def test_a_template_rename_refused_without_file_renames_or_onto_a_file(client, workspace):
    path = workspace / "quickstart_tools.srpo"
    text = path.read_text()
    uri = client.open(path, text)
    where = at(uri, text, "agent solver", "quickstart_tools/solver")
    got = reply(client, "textDocument/rename", {**where, "newName": "quickstart_tools/worker.j2"})
    assert "cannot rename files" in got["error"]["message"]
    pos = lsp.Position(**where["position"])
    with pytest.raises(Refused, match="already exists"):
        rename(text, str(path), uri, pos, "quickstart_tools/observe.j2", True, workspace)
    with pytest.raises(Refused, match="without"):
        rename(text, str(path), uri, pos, "../solver.j2", True, workspace)


def test_a_template_is_renamed_where_another_includes_it(tmp_path):
    shutil.copytree(ROOT / "workflows" / "quickstart_tools", tmp_path / "quickstart_tools")
    shutil.copy(ROOT / "workflows" / "quickstart_tools.srpo", tmp_path)
    wrapper = tmp_path / "quickstart_tools" / "wrapper.j2"
    wrapper.write_text('Solve it.\n{% include "quickstart_tools/solver.j2" %}\n', encoding="utf-8")
    second = _user(tmp_path, "wrapped.srpo", "quickstart_tools/wrapper.j2")
    path = tmp_path / "quickstart_tools.srpo"
    text = path.read_text()
    before = {p: _codes(p.read_text(), p) for p in (path, second)}
    pos = lsp.Position(**at("", text, "agent solver", "quickstart_tools/solver")["position"])
    edit = rename(text, str(path), path.as_uri(), pos, "quickstart_tools/worker.j2", True, tmp_path)
    *changes, moved = edit.document_changes
    assert wrapper.resolve().as_uri() in {ch.text_document.uri for ch in changes}
    for ch in changes:
        file = Path(ch.text_document.uri[len("file://") :])
        file.write_text(applied(file.read_text(), ch.edits), encoding="utf-8")
    Path(moved.old_uri[len("file://") :]).rename(moved.new_uri[len("file://") :])
    assert '{% include "quickstart_tools/worker.j2" %}' in wrapper.read_text()
    assert {p: _codes(p.read_text(), p) for p in (path, second)} == before


@pytest.mark.editor
def test_workspace_symbols_and_references_of_python(workspace):
    c = LspClient()
    try:
        c.initialize(workspace)
        found = c.request("workspace/symbol", {"query": "researcher"})
        path = workspace / "supervisor.srpo"
        text = path.read_text()
        uri = c.open(path, text)
        where = at(uri, text, "tool python", "math_python.py")
        refs = c.request("textDocument/references", {**where, "context": {"includeDeclaration": True}})
    finally:
        c.close()
    assert {Path(s["location"]["uri"]).name for s in found} >= {"search_r1.srpo"}
    assert all("researcher" in s["name"] for s in found) and found[0]["kind"] == lsp.SymbolKind.Class
    users = {p.name for p in workspace.glob("*.srpo") if '"math_python.py:run_python"' in p.read_text()}
    assert len(users) > 1 and {Path(r["uri"]).name for r in refs} == users


def _codes(text: str, path: Path) -> list[str]:
    return sorted(str(d.code) for d in diagnose(text, str(path))[0])


SHIPPED = sorted((ROOT / "workflows").glob("*.srpo"))


@pytest.mark.parametrize("shipped", SHIPPED, ids=lambda p: p.stem)
def test_every_rename_of_a_shipped_workflow_keeps_its_diagnostics(workspace, shipped):
    path = workspace / shipped.name
    text = path.read_text()
    before = _codes(text, path)
    program = parsed(text, str(path))
    for kind, decls in declarations(program).items():
        for name, decl in decls.items():
            pos = lsp.Position(line=decl.name.span.line - 1, character=decl.name.span.col - 1)
            edit = rename(text, str(path), path.as_uri(), pos, f"{name}_2", False, workspace)
            renamed = applied(text, edit.changes[path.as_uri()])
            assert f"{name}_2" in renamed and _codes(renamed, path) == before, (kind, name)
            for taken in ("train", next(iter(set(declarations(program)["policy"]) - {name}), "if")):
                with pytest.raises(Refused):
                    rename(text, str(path), path.as_uri(), pos, taken, False, workspace)


@pytest.mark.slow
def test_every_template_rename_keeps_every_workflows_diagnostics(workspace):
    """Each template the shipped workflows name from their folder: renamed, moved, every user re-checked."""
    texts = {p: p.read_text() for p in sorted(workspace.glob("*.srpo"))}
    before = {p: _codes(t, p) for p, t in texts.items()}
    seen = set()
    for path, text in texts.items():
        for occ in (o for o in occurrences(parsed(text, str(path))) if o.kind == "template"):
            if occ.text in seen or not (workspace / occ.text).is_file():
                continue
            seen.add(occ.text)
            pos = lsp.Position(line=occ.span.line - 1, character=occ.span.col)
            new = str(Path(occ.text).with_name("renamed_" + Path(occ.text).name))
            edit = rename(text, str(path), path.as_uri(), pos, new, True, workspace)
            *changes, moved = edit.document_changes
            assert moved.new_uri == (workspace / new).as_uri()
            (workspace / occ.text).rename(workspace / new)
            try:
                for ch in changes:
                    user = Path(ch.text_document.uri[len("file://") :])
                    assert _codes(applied(texts[user], ch.edits), user) == before[user], (occ.text, user)
                untouched = set(texts) - {Path(ch.text_document.uri[len("file://") :]) for ch in changes}
                assert all(_codes(texts[p], p) == before[p] for p in untouched if occ.text not in texts[p])
            finally:
                (workspace / new).rename(workspace / occ.text)
    assert len(seen) > 20


def test_the_workspace_is_its_workflows_outside_hidden_and_installed_folders(tmp_path):
    for name in ("a/b.srpo", ".git/c.srpo", "node_modules/d.srpo", "e.srpo", "f.j2"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("workflow x\n", encoding="utf-8")
    assert workflow_paths(tmp_path) == [
        (tmp_path / "a" / "b.srpo").resolve(),
        (tmp_path / "e.srpo").resolve(),
    ]
    assert workflow_paths(None) == []
