"""`srpo-dsl lsp` under strain (issue 37): the last good analysis answers while the text has a syntax
error, a burst of edits is analysed once, deep nesting is one diagnostic and every request is
answered, line endings as `fmt` keeps them, positions in UTF-16, and a 5,000-line workflow in time."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from srpo_dsl.lang.syntax.nesting import MAX_NESTING
from srpo_dsl.lang.tooling.format import format_source
from srpo_dsl.lsp import collector, diagnostics
from srpo_dsl.lsp.linemap import LineMap
from tests.support.clitools import ROOT, load_bench
from tests.support.lang_cases import BASE, TEMPLATES
from tests.support.lsptools import OPTIONS

LspClient = load_bench("lsp_client").LspClient

SUPERVISOR = ROOT / "workflows" / "supervisor.srpo"  # opened, never written


def _at(text: str, line_has: str, word: str) -> dict:
    lines = text.split("\n")
    line = next(i for i, x in enumerate(lines) if line_has in x)
    return {"line": line, "character": lines[line].index(word) + 1}


def _ask(client, method: str, uri: str, **params) -> object:
    return client.request(method, {"textDocument": {"uri": uri}, **params})


def _hover(client, uri: str, text: str, line_has: str, word: str) -> str | None:
    found = _ask(client, "textDocument/hover", uri, position=_at(text, line_has, word))
    return found["contents"]["value"] if found else None


def _definition_line(client, uri: str, text: str, line_has: str, word: str) -> int | None:
    found = _ask(client, "textDocument/definition", uri, position=_at(text, line_has, word))
    return found["range"]["start"]["line"] if found else None


def _symbols(client, uri: str) -> dict[str, dict]:
    """Every symbol under the workflow's, by name (the innermost of a name wins)."""
    out, todo = {}, list(_ask(client, "textDocument/documentSymbol", uri)[0]["children"])
    while todo:
        s = todo.pop(0)
        out[s["name"]] = s
        todo += s.get("children") or []
    return out


@pytest.mark.editor
def test_the_last_good_analysis_answers_while_the_end_is_half_typed(client):
    """`agent judge uses` half-typed at the end: the syntax error is shown, and hover (an agent's, a
    step's cost), go to definition and symbols answer as before; formatting is refused."""
    text = SUPERVISOR.read_text()
    uri = client.open(SUPERVISOR, text)
    assert client.diagnostics(uri) == []
    broken = text + "agent judge uses"
    client.replace(uri, broken, 2)
    assert [d["code"] for d in client.diagnostics(uri)] == ["E003"]
    assert "at most 12 times an episode" in _hover(client, uri, broken, "act researcher", "act")
    assert "supervisor/researcher.j2" in _hover(client, uri, broken, "act researcher", "researcher")
    assert _definition_line(client, uri, broken, "act researcher", "researcher") == 13
    symbols = _symbols(client, uri)
    assert {"researcher", "act researcher", "repeat at most 4", "train"} <= set(symbols)
    assert symbols["act researcher"]["range"]["start"] == {"line": 21, "character": 12}
    assert _ask(client, "textDocument/formatting", uri, options=OPTIONS) == []


@pytest.mark.editor
def test_an_edit_in_the_middle_leaves_the_lines_around_it_answering(client):
    """A step edited into a syntax error and a line typed after it: the lines before the first edited
    line stay, those after the last one move by the line added, and what was on an edited line is gone."""
    text = SUPERVISOR.read_text()
    uri = client.open(SUPERVISOR, text)
    client.diagnostics(uri)
    broken = text.replace(
        "            act researcher\n", "            act researcher ]\n            # typing\n"
    )
    client.replace(uri, broken, 2)
    assert [d["code"] for d in client.diagnostics(uri)] == ["E001"]
    symbols = _symbols(client, uri)
    assert "act researcher" not in symbols
    assert symbols["break if researcher == answer"]["range"]["start"]["line"] == 23  # moved by one
    assert symbols["call python on calculator"]["range"]["start"]["line"] == 29
    loop = symbols["repeat at most 3"]["range"]  # around the edit: both ends on lines left alone
    assert (loop["start"]["line"], loop["end"]["line"]) == (20, 25)
    assert _hover(client, uri, broken, "act researcher ]", "act") is None
    assert _hover(client, uri, broken, "call python on", "call").startswith("**call python on calculator**")
    assert _definition_line(client, uri, broken, "if supervisor != finish", "supervisor") == 12
    assert _definition_line(client, uri, broken, "act calculator", "calculator") == 14


@pytest.mark.editor
def test_a_text_that_never_parsed_answers_nothing_but_answers(client, tmp_path):
    uri = client.open(tmp_path / "w.srpo", "workflow w\nagent = \n")
    assert [d["code"] for d in client.diagnostics(uri)] == ["E001"]
    assert _ask(client, "textDocument/documentSymbol", uri) == []
    assert _ask(client, "textDocument/hover", uri, position={"line": 1, "character": 1}) is None


def _nested(depth: int) -> str:
    loops = "repeat at most 2 {\n" * depth + "verify verifier\n" + "}\n" * depth
    return BASE.replace("aggregate agg\n", loops + "aggregate agg\n")


def _depth(symbol: dict) -> int:
    """How many levels of symbols lie under `symbol` (without recursion: the answer may be deep)."""
    depth, level = 0, [symbol]
    while level:
        level = [c for s in level for c in s.get("children") or []]
        depth += bool(level)
    return depth


@pytest.mark.editor
def test_deep_nesting_is_one_diagnostic_and_every_request_is_answered(client, tmp_path):
    """At the limit the symbols nest as the blocks do; 300 and 2,000 levels are one E008 (no recursion
    error, no request left unanswered, no stale diagnostics), the last good analysis answering."""
    (tmp_path / "p.j2").write_text(TEMPLATES["p.j2"])
    text = _nested(MAX_NESTING)
    uri = client.open(tmp_path / "deep.srpo", text)
    assert "E008" not in {d["code"] for d in client.diagnostics(uri)}
    (workflow,) = _ask(client, "textDocument/documentSymbol", uri)
    assert _depth(workflow) == MAX_NESTING + 1  # under the workflow: the loops, the step inside
    first = BASE.split("\n").index("aggregate agg") + MAX_NESTING  # the first loop too deep (0-based)
    for version, depth in [(2, 300), (3, 2000)]:
        client.replace(uri, _nested(depth), version)
        (diag,) = client.diagnostics(uri)
        assert diag["code"] == "E008" and diag["range"]["start"] == {"line": first, "character": 0}
        (workflow,) = _ask(client, "textDocument/documentSymbol", uri)
        assert _depth(workflow) == MAX_NESTING  # the loops around the edited line
        position = {"line": first - 1, "character": 0}
        assert (
            "repeat at most 2"
            in _ask(client, "textDocument/hover", uri, position=position)["contents"]["value"]
        )
        assert _ask(client, "textDocument/formatting", uri, options=OPTIONS) == []


def _published(client, uri: str, last: int) -> list[int]:
    """The versions published for `uri` until `last`'s."""
    versions: list[int] = []

    def wanted(m: dict) -> bool:
        if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri:
            versions.append(m["params"]["version"])
        return bool(versions) and versions[-1] == last

    client.receive(wanted)
    return versions


@pytest.mark.editor
def test_a_burst_of_changes_is_analysed_once(client, tmp_path):
    uri = client.open(tmp_path / "w.srpo", BASE)
    client.diagnostics(uri)
    for version in range(2, 32):
        client.replace(uri, BASE + f"# edit {version}\n", version)
    versions = _published(client, uri, 31)
    # Each change restarts a 10 ms wait; a loaded machine may stall the server longer mid-burst.
    assert len(versions) <= 2, versions


@pytest.mark.editor
def test_a_change_is_published_though_the_poll_analyses_it_first(tmp_path):
    """The poll analyses a document again while a template it reads was written under 2 s ago (its state
    not settled yet), and publishes only diagnostics that changed; a change whose analysis was due
    then is published all the same, for its version."""
    c = LspClient(["--poll", "0.05"])
    try:
        c.initialize(ROOT)
        (tmp_path / "p.j2").write_text(TEMPLATES["p.j2"])
        uri = c.open(tmp_path / "w.srpo", BASE)
        c.diagnostics(uri)
        for version in range(2, 12):
            c.replace(uri, BASE + f"# {version}\n", version)
            assert _published(c, uri, version)[-1] == version
    finally:
        c.close()


@pytest.mark.editor
def test_formatting_keeps_the_buffer_s_line_endings(client, tmp_path):
    """An editor's CRLF buffer in the layout gets no edit; a messy one gets the layout in CRLF."""
    crlf = format_source(BASE).replace("\n", "\r\n")
    uri = client.open(tmp_path / "w.srpo", crlf)
    client.diagnostics(uri)
    assert _ask(client, "textDocument/formatting", uri, options=OPTIONS) == []
    client.replace(uri, crlf.replace("repeat at most 2 {", "repeat  at most 2{"), 2)
    (edit,) = _ask(client, "textDocument/formatting", uri, options=OPTIONS)
    assert edit["newText"] == crlf


@pytest.mark.editor
def test_positions_are_utf16_where_the_text_is_not_ascii(client, tmp_path):
    """A name after an emoji and CJK on its line: LSP counts UTF-16 units (the emoji is two)."""
    decl = 'agent agg uses lm prompt "😀提示.j2" emits final_boxed with (foo = solver)'
    text = BASE.replace('agent agg uses lm prompt "p.j2" emits final_boxed', decl)
    (tmp_path / "p.j2").write_text(TEMPLATES["p.j2"])
    uri = client.open(tmp_path / "w.srpo", text)
    line = text.split("\n").index(decl)

    def units(prefix: str) -> int:
        return len(prefix.encode("utf-16-le")) // 2

    (e023,) = client.diagnostics(uri)  # unknown option `foo`: its range is past the emoji
    assert e023["range"] == {
        "start": {"line": line, "character": units(decl[: decl.index("foo")])},
        "end": {"line": line, "character": units(decl[: decl.index(")")])},
    }
    at = {"line": line, "character": units(decl[: decl.index(")")])}  # just past `solver`
    found = _ask(client, "textDocument/definition", uri, position=at)
    assert found["range"]["start"] == {
        "line": BASE.split("\n").index('agent solver[3] uses lm prompt "p.j2" emits boxed'),
        "character": 6,
    }


def _big(steps: int, typos: bool = False) -> str:
    """BASE with `steps` more steps, 5 lines a loop (`typos`: three undefined agents a loop, E012 each)."""
    router, solver, verifier = ("routr", "solvr", "verifer") if typos else ("router", "solver", "verifier")
    loop = f"repeat at most 2 {{\n    route {router}\n    parallel {solver}\n    verify {verifier}\n}}\n"
    return BASE.replace("aggregate agg\n", loop * (steps // 5) + "aggregate agg\n")


def _edit_latency(client, uri: str, text: str, first: int, edits: int = 5) -> list[float]:
    times = []
    for version in range(first, first + edits):
        start = time.perf_counter()
        client.replace(uri, text + f"# edit {version}\n", version)
        client.diagnostics(uri)
        times.append(time.perf_counter() - start)
    return times


def _symbols_latency(client, uri: str, times: int = 5) -> list[float]:
    out = []
    for _ in range(times):
        start = time.perf_counter()
        _ask(client, "textDocument/documentSymbol", uri)
        out.append(time.perf_counter() - start)
    return out


@pytest.mark.editor
def test_a_5000_line_workflow_is_answered_in_time(client, tmp_path):
    """The issue's figures: 1.6 s for symbols, 6.2 s to publish 3,199 diagnostics, 2.8 s behind after
    30 keystrokes at 10/s. The goal is 200 ms an edit's diagnostics and symbols; the bounds here are
    generous for a loaded 2-core machine, and the figures are printed."""
    (tmp_path / "p.j2").write_text(TEMPLATES["p.j2"])
    text = _big(5000)
    uri = client.open(tmp_path / "big.srpo", text)
    assert client.diagnostics(uri) == []
    edit = statistics.median(_edit_latency(client, uri, text, 2))
    symbols = statistics.median(_symbols_latency(client, uri))
    wrong = _big(5000, typos=True)
    client.replace(uri, wrong, 10)
    count = len(client.diagnostics(uri))
    many = statistics.median(_edit_latency(client, uri, wrong, 11))
    for version in range(20, 50):  # keystrokes at 10 a second
        client.replace(uri, text + "#" * (version - 19) + "\n", version)
        last = time.perf_counter()
        time.sleep(0.1)
    _published(client, uri, 49)
    behind = time.perf_counter() - last
    print(
        f"{len(text.splitlines())} lines: edit -> diagnostics {edit * 1e3:.0f} ms, symbols {symbols * 1e3:.0f} ms; "
        f"{count} diagnostics -> published {many * 1e3:.0f} ms; after 30 keystrokes at 10/s the "
        f"diagnostics come {behind * 1e3:.0f} ms after the last"
    )
    assert count >= 3000
    assert edit < 0.6 and symbols < 0.6 and many < 1.0 and behind < 1.0


def test_lines_map_from_the_last_good_text_to_the_current_one():
    old = "a\nb\nc\nd\n"
    lines = LineMap.between(old, "a\nB\nx\nc\nd\n")  # line 1 edited, a line inserted after it
    assert [lines.to_new(i) for i in range(5)] == [0, None, 3, 4, 5]
    assert [lines.to_old(i) for i in range(6)] == [0, None, None, 2, 3, 4]
    assert LineMap.between(old, old).to_new(3) == 3
    rng = lsp.Range(start=lsp.Position(line=0, character=1), end=lsp.Position(line=2, character=1))
    assert lines.range_to_new(rng) == lsp.Range(
        start=lsp.Position(line=0, character=1), end=lsp.Position(line=3, character=1)
    )


def test_an_analysis_that_fails_says_so_in_place_of_its_diagnostics(monkeypatch):
    """A bug in analysis (here a RecursionError) is one diagnostic, not silence and stale ones."""

    def fail(text: str, path: str) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(diagnostics, "analyze", fail)
    (diag,), good = diagnostics.diagnose("workflow w\n", str(Path("w.srpo")))
    assert good is None and diag.severity == lsp.DiagnosticSeverity.Error
    assert "could not analyse this file (RecursionError: maximum recursion depth exceeded)" in diag.message


def test_the_cycle_collector_waits_for_a_pause(monkeypatch):
    """A collection `idle` seconds after the last analysis, or at once after `most` without a pause."""
    runs = []
    monkeypatch.setattr(collector.gc, "collect", lambda: runs.append(1))

    async def edits() -> None:
        c = collector.IdleCollector(idle=0.05, most=3)
        c.analysed()
        c.analysed()
        assert runs == [] and c.pending == 2
        await asyncio.sleep(0.2)
        assert runs == [1] and c.pending == 0
        for _ in range(3):
            c.analysed()
        assert runs == [1, 1] and c.timer is None

    asyncio.run(edits())
