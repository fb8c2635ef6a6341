"""While the text has a syntax error, references, rename, code lens, folding and links answer from the
last text that parsed, as hover, definition and symbols do (issue 49, `srpo_dsl/lsp/lastgood.py`), over
the real server."""

from __future__ import annotations

import pytest

from tests.support.clitools import ROOT, load_bench
from tests.support.lsptools import editor_files

pytestmark = pytest.mark.editor

LspClient = load_bench("lsp_client").LspClient


@pytest.fixture
def opened(tmp_path):
    """The quickstart (with its templates) open, then broken on the line `aggregate aggregator`."""
    path, _ = editor_files(tmp_path)
    text = (ROOT / "workflows" / "quickstart.srpo").read_text(encoding="utf-8")
    path.write_text(text, encoding="utf-8")
    client = LspClient()
    try:
        client.initialize(tmp_path)
        uri = client.open(path, text)
        assert client.diagnostics(uri) == []
        lines = text.split("\n")
        broken = lines.index("aggregate aggregator # singleton event; its answer is rewarded")
        lines[broken] = "aggregate aggregator {{{"
        client.replace(uri, "\n".join(lines), 2)
        assert client.diagnostics(uri)[0]["code"].startswith("E")
        yield client, uri, lines, broken
    finally:
        client.close()


def _doc(uri: str, **more) -> dict:
    return {"textDocument": {"uri": uri}, **more}


def test_references_rename_lenses_folding_and_links_answer_during_a_syntax_error(opened):
    client, uri, lines, broken = opened
    verifier = next(i for i, x in enumerate(lines) if x.startswith("verify verifier"))
    at = {"line": verifier, "character": len("verify ve")}
    found = client.request(
        "textDocument/references", _doc(uri, position=at, context={"includeDeclaration": True})
    )
    assert {r["range"]["start"]["line"] for r in found} == {
        i for i, x in enumerate(lines) if "verifier " in x and not x.startswith("#")
    }
    lenses = client.request("textDocument/codeLens", _doc(uri))
    assert lenses and broken not in {lens["range"]["start"]["line"] for lens in lenses}
    links = client.request("textDocument/documentLink", _doc(uri))
    assert len(links) == 3
    assert client.request("textDocument/foldingRange", _doc(uri))  # the comment runs and the train line
    edit = client.request("textDocument/rename", _doc(uri, position=at, newName="checker"))
    changed = edit.get("changes", {}).get(uri) or edit["documentChanges"][0]["edits"]
    assert len(changed) == len(found)


def test_a_rename_that_would_touch_the_edited_line_is_refused(opened):
    client, uri, lines, _ = opened
    decl = next(i for i, x in enumerate(lines) if x.startswith("agent aggregator"))
    at = {"line": decl, "character": len("agent aggr")}
    client.send({"id": 99, "method": "textDocument/rename", "params": _doc(uri, position=at, newName="agg")})
    reply = client.receive(lambda m: m.get("id") == 99 and "method" not in m)
    assert reply["error"]["code"] == -32803
    assert "syntax error" in reply["error"]["message"]
