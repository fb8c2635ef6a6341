"""`srpo-dsl lsp`'s editing features over the real server: completion by position, quick fixes, rename
and references, links, folding, semantic tokens, code lenses and the graph command (issue 37, part 4)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.syntax.steps import step_keywords
from srpo_dsl.registries import CONTRACTS, OBJECTIVES
from tests.support.clitools import ROOT, load_bench

pytestmark = pytest.mark.editor

LspClient = load_bench("lsp_client").LspClient

WORKFLOWS = ROOT / "workflows"
STEPS = {*step_keywords(), "call", "step", "repeat", "if", "break"}
DECLARATIONS = {"policy", "task", "tool", "env", "agent", "reward", "train"}
AGENTS = {"router", "solver", "verifier", "aggregator"}


def after(text: str, line_has: str, word: str) -> dict:
    """The position just after the first `word` on the first line holding `line_has`."""
    lines = text.splitlines()
    line = next(i for i, x in enumerate(lines) if line_has in x)
    return {"line": line, "character": lines[line].index(word) + len(word)}


def offered(client, uri: str, position: dict) -> dict[str, dict]:
    params = {"textDocument": {"uri": uri}, "position": position}
    return {i["label"]: i for i in client.request("textDocument/completion", params)["items"]}


def test_completion_offers_what_fits_the_position(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    end = {"line": len(text.splitlines()), "character": 0}
    assert set(offered(client, uri, end)) == STEPS | DECLARATIONS  # a statement starts: keywords only
    in_loop = {"line": text.splitlines().index("repeat at most 4 {") + 1, "character": 0}
    assert set(offered(client, uri, in_loop)) == STEPS  # no declaration inside a block
    agents = offered(client, uri, after(text, "parallel solver by router", "parallel "))
    assert set(agents) == AGENTS and agents["solver"]["detail"] == "agent (pool of 3)"
    assert set(offered(client, uri, after(text, "parallel solver by router", "by "))) == AGENTS
    clause = set(offered(client, uri, after(text, "parallel solver by router", "solver ")))
    assert {"by", "only", "branch"} <= clause and not clause & (AGENTS | DECLARATIONS)
    assert set(offered(client, uri, after(text, "agent router", "uses "))) == {"lm"}
    assert set(offered(client, uri, after(text, "agent router", "emits "))) == set(CONTRACTS)
    assert set(offered(client, uri, after(text, "until verifier", "== "))) == {"approve", "reject"}
    assert set(offered(client, uri, after(text, "policy lm", "= "))) == {"hf", "builtin", "adapter"}


def test_completion_of_options_and_their_values(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    assert set(offered(client, uri, after(text, "train with", "("))) == set(TrainOptions.model_fields)
    assert set(offered(client, uri, after(text, "train with", "objective = "))) == set(OBJECTIVES)
    assert set(offered(client, uri, after(text, "train with", "set_norm = "))) == {"sqrt", "mean", "none"}
    text = text.replace("clip = 0.2", "aggregation = x, gradient_checkpointing = x, old_logprobs = x")
    uri = client.open(routed, text)
    aggregations = set(offered(client, uri, after(text, "train with", "aggregation = ")))
    assert aggregations == {'"event-mean"', '"token-mean"', '"row-mean"', '"episode-mean"'}
    assert set(offered(client, uri, after(text, "train with", "checkpointing = "))) == {"true", "false"}
    assert set(offered(client, uri, after(text, "train with", "logprobs = "))) == {"recompute", "rollout"}
    assert set(offered(client, uri, after(text, "agent router", "max_tokens = "))) == set()


def test_no_completion_in_comments_and_strings_and_no_space_trigger(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    assert offered(client, uri, after(text, "route router", "# singleton")) == {}
    assert offered(client, uri, after(text, "policy lm", '"Qwen/')) == {}  # a string that names no file
    c = LspClient()
    try:
        triggers = c.initialize(ROOT)["capabilities"]["completionProvider"]["triggerCharacters"]
    finally:
        c.close()
    assert " " not in triggers


def test_completion_after_an_error_earlier_in_the_file(client, routed):
    text = routed.read_text().replace("repeat at most 4 {", "agent broken uses\nrepeat at most 4 {")
    uri = client.open(routed, text)
    offers = set(offered(client, uri, after(text, "parallel solver by router", "parallel ")))
    assert offers == AGENTS | {"broken"}  # declared, if not well
    typed = text.replace("parallel solver by router", "parallel sol")
    uri = client.open(routed, typed)
    assert set(offered(client, uri, after(typed, "parallel sol", "parallel sol"))) == offers


def fixes(client, uri: str, text: str, has: str) -> dict[str, dict]:
    """The quick fixes offered on the first line holding `has`, by title: each one's single edit."""
    line = line_of(text, has)
    end = len(text.splitlines()[line])
    whole_line = {"start": {"line": line, "character": 0}, "end": {"line": line, "character": end}}
    params = {"textDocument": {"uri": uri}, "range": whole_line, "context": {"diagnostics": []}}
    actions = client.request("textDocument/codeAction", params)
    assert all(a["kind"] == "quickfix" for a in actions)
    return {a["title"]: a["edit"]["changes"][uri][0] for a in actions}


def applied(text: str, edit: dict) -> str:
    lines = text.split("\n")
    start, end = edit["range"]["start"], edit["range"]["end"]
    assert start["line"] == end["line"]
    line = lines[start["line"]]
    lines[start["line"]] = line[: start["character"]] + edit["newText"] + line[end["character"] :]
    return "\n".join(lines)


def line_of(text: str, has: str) -> int:
    return next(i for i, x in enumerate(text.splitlines()) if has in x)


def test_quick_fixes_apply_the_hint_or_declare_the_name(client, routed):
    good = routed.read_text()
    text = good.replace("parallel solver by router", "parallel solvers by router")
    routed.write_text(text)
    uri = client.open(routed, text)
    found = fixes(client, uri, text, "parallel solvers")
    assert set(found) == {"Change `solvers` to `solver`", "Declare `solvers`"}
    assert applied(text, found["Change `solvers` to `solver`"]) == good
    last = line_of(text, "agent aggregator")
    end_of_agents = {"line": last, "character": len(text.splitlines()[last])}
    assert found["Declare `solvers`"] == {
        "range": {"start": end_of_agents, "end": end_of_agents},
        "newText": '\nagent solvers uses lm prompt "solvers.j2" emits boxed',
    }
    client.replace(uri, applied(text, found["Change `solvers` to `solver`"]), 2)
    assert client.diagnostics(uri) == []


def test_quick_fix_of_an_options_name_changes_the_name_alone(client, routed):
    text = routed.read_text().replace("with (max_tokens = 256)", "with (max_token = 256)")
    uri = client.open(routed, text)
    found = fixes(client, uri, text, "max_token = 256")
    assert list(found) == ["Change `max_token` to `max_tokens`"]
    assert applied(text, found["Change `max_token` to `max_tokens`"]) == routed.read_text()


def test_quick_fix_of_a_missing_template_is_the_nearest_file(client, routed):
    text = routed.read_text().replace('"math/solver.j2"', '"math/solvr.j2"')
    uri = client.open(routed, text)
    found = fixes(client, uri, text, "math/solvr.j2")
    assert list(found) == ['Use the template "math/solver.j2"']
    assert applied(text, found['Use the template "math/solver.j2"']) == routed.read_text()


def all_applied(text: str, edits: list[dict]) -> str:
    """`text` with every (one-line) edit, the last first."""
    for edit in sorted(edits, key=lambda e: (e["range"]["start"]["line"], e["range"]["start"]["character"]))[
        ::-1
    ]:
        text = applied(text, edit)
    return text


def test_rename_and_references_of_an_agent_and_a_policy(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    at = {"textDocument": {"uri": uri}, "position": after(text, "parallel solver", "parallel s")}
    edit = client.request("textDocument/rename", {**at, "newName": "worker"})
    renamed = (
        text.replace("solver[3]", "worker[3]").replace("(solver)", "(worker)").replace("l solver", "l worker")
    )
    assert all_applied(text, edit["changes"][uri]) == renamed and '"math/solver.j2"' in renamed
    found = client.request("textDocument/references", {**at, "context": {"includeDeclaration": False}})
    assert sorted(r["range"]["start"]["line"] for r in found) == [
        line_of(text, "route(solver)"),
        line_of(text, "parallel solver"),
    ]
    found = client.request("textDocument/references", {**at, "context": {"includeDeclaration": True}})
    assert len(found) == 3
    prepared = client.request("textDocument/prepareRename", at)
    assert prepared["placeholder"] == "solver"
    client.next_id += 1  # a keyword: refused, with a message the client shows
    client.send({"id": client.next_id, "method": "textDocument/rename", "params": {**at, "newName": "agent"}})
    refused = client.receive(lambda m: m.get("id") == client.next_id)
    assert "keyword" in refused["error"]["message"]
    at["position"] = after(text, "agent router", "uses l")
    edit = client.request("textDocument/rename", {**at, "newName": "model"})
    assert all_applied(text, edit["changes"][uri]) == text.replace(" lm ", " model ")
    at["position"] = after(text, "repeat at most 4", "rep")
    assert client.request("textDocument/prepareRename", at) is None


def test_rename_a_template_path_and_its_file(routed):
    text = routed.read_text()
    c = LspClient()
    try:
        resources = {"workspaceEdit": {"documentChanges": True, "resourceOperations": ["rename"]}}
        c.initialize(ROOT, {"workspace": resources})
        uri = c.open(routed, text)
        at = {"textDocument": {"uri": uri}, "position": after(text, "agent solver", "math/sol")}
        edit = c.request("textDocument/rename", {**at, "newName": "math/worker.j2"})
    finally:
        c.close()
    changed, moved = edit["documentChanges"]
    assert all_applied(text, changed["edits"]) == text.replace("math/solver.j2", "math/worker.j2")
    assert moved == {
        "kind": "rename",
        "oldUri": (routed.parent / "math" / "solver.j2").resolve().as_uri(),
        "newUri": (routed.parent / "math" / "worker.j2").resolve().as_uri(),
    }


SUPERVISOR = WORKFLOWS / "supervisor.srpo"  # opened, never written


def test_document_links_to_templates_and_python(client):
    text = SUPERVISOR.read_text()
    uri = client.open(SUPERVISOR, text)
    links = client.request("textDocument/documentLink", {"textDocument": {"uri": uri}})
    got = {(link["range"]["start"]["line"], link["target"]) for link in links}
    folder = SUPERVISOR.parent.resolve()
    py = (folder / "math_python.py").read_text().splitlines()
    def_line = next(i for i, x in enumerate(py) if x.startswith("def run_python(")) + 1
    assert got == {
        (line_of(text, "tool python"), f"{(folder / 'math_python.py').as_uri()}#L{def_line}"),
        *{
            (line_of(text, f"agent {role}"), (folder / "supervisor" / f"{role}.j2").as_uri())
            for role in ("supervisor", "researcher", "calculator")
        },
    }
    prompt = next(link for link in links if link["target"].endswith("researcher.j2"))
    assert prompt["range"] == {
        "start": after(text, "agent researcher", 'prompt "'),
        "end": after(text, "agent researcher", "researcher.j2"),
    }


def test_folding_ranges(client):
    text = SUPERVISOR.read_text()
    uri = client.open(SUPERVISOR, text)
    ranges = client.request("textDocument/foldingRange", {"textDocument": {"uri": uri}})
    got = [(r["startLine"], r["endLine"], r.get("kind")) for r in ranges]
    research = line_of(text, "if supervisor == research")
    assert got == [
        (0, 4, "comment"),
        (line_of(text, "repeat at most 4"), line_of(text, "if supervisor != finish") - 2, None),
        (research, research + 5, None),
        (research + 1, research + 4, None),
        (line_of(text, "if supervisor == compute"), line_of(text, "call python on"), None),
        (line_of(text, "if supervisor != finish"), line_of(text, "act supervisor only"), None),
    ]


def decoded(data: list[int], text: str, legend: list[str]) -> list[tuple[int, str, str]]:
    """(line, text, type) of each semantic token."""
    lines, out, line, start = text.split("\n"), [], 0, 0
    for i in range(0, len(data), 5):
        d_line, d_start, length, kind, _ = data[i : i + 5]
        line, start = line + d_line, (start + d_start if d_line == 0 else d_start)
        out.append((line, lines[line][start : start + length], legend[kind]))
    return out


def test_semantic_tokens(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    c = LspClient()
    try:
        provider = c.initialize(ROOT)["capabilities"]["semanticTokensProvider"]
    finally:
        c.close()
    data = client.request("textDocument/semanticTokens/full", {"textDocument": {"uri": uri}})["data"]
    tokens = decoded(data, text, provider["legend"]["tokenTypes"])
    line = line_of(text, "agent router")
    assert [(t, kind) for n, t, kind in tokens if n == line] == [
        ("agent", "keyword"),
        ("router", "class"),
        ("uses", "keyword"),
        ("lm", "variable"),
        ("prompt", "keyword"),
        ('"math/router.j2"', "string"),
        ("emits", "keyword"),
        ("route", "function"),
        ("solver", "class"),
        ("with", "keyword"),
        ("max_tokens", "property"),
        ("=", "operator"),
        ("256", "number"),
    ]
    line = line_of(text, "} until verifier")
    assert [(t, kind) for n, t, kind in tokens if n == line] == [
        ("until", "keyword"),
        ("verifier", "class"),
        ("==", "operator"),
        ("approve", "enumMember"),
    ]
    assert tokens[0] == (0, text.splitlines()[0], "comment")


def test_code_lenses_give_each_steps_k_range_and_cost(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    lenses = client.request("textDocument/codeLens", {"textDocument": {"uri": uri}})
    titles = {lens["range"]["start"]["line"]: lens["command"]["title"] for lens in lenses}
    parallel = titles[line_of(text, "parallel solver by router")]
    assert parallel.startswith("K 1..3 · at most: events 1 · model calls 3 · tool calls 0 · ")
    assert parallel.endswith(" · up to 4× an episode")
    assert titles[line_of(text, "aggregate aggregator")].startswith(
        "K = 1 · at most: events 1 · model calls 1 ·"
    )
    assert len(lenses) == 5  # the loop and its 3 steps, and `aggregate`
    text = SUPERVISOR.read_text()
    uri = client.open(SUPERVISOR, text)
    lenses = client.request("textDocument/codeLens", {"textDocument": {"uri": uri}})
    titles = {lens["range"]["start"]["line"]: lens["command"]["title"] for lens in lenses}
    assert titles[line_of(text, "act researcher")] == (
        "K = 1 · at most: events 1 · model calls 1 · tool calls 0 · generated tokens 512 · up to 12× an episode"
    )
    assert titles[line_of(text, "repeat at most 4")] == (
        "at most: events 16 · model calls 16 · tool calls 12 · generated tokens 8192"
    )


def test_the_graph_command_gives_compiles_mermaid(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    shown = client.request("workspace/executeCommand", {"command": "srpo.showGraph", "arguments": [uri]})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "srpo_dsl", "compile", str(routed.resolve()), "--emit", "mermaid"]
    printed = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=True).stdout
    assert shown == printed and shown.startswith("flowchart TD")
    client.replace(uri, text.replace("agent router", "agent = router"), 2)
    assert (
        client.request("workspace/executeCommand", {"command": "srpo.showGraph", "arguments": [uri]}) is None
    )


def test_completion_of_a_finish_condition(client, tmp_path):
    """`if solver.` offers `finish`; `solver.finish == ` the finish reasons; the outline writes it as written."""
    source = (ROOT / "workflows" / "quickstart_stop.srpo").read_text()
    text = source.replace("break if solver == answer", "break if solver.finish == length")
    path = tmp_path / "w.srpo"
    uri = client.open(path, text)
    assert set(offered(client, uri, after(text, "break if solver.", "solver."))) == {"finish"}
    assert set(offered(client, uri, after(text, "break if solver.", "== "))) == {"eos", "stop", "length"}
    assert {"stop_strings", "top_k", "min_tokens"} <= set(
        offered(client, uri, after(text, "agent solver", "with ("))
    )
    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    names = [c["name"] for s in symbols[0]["children"] for c in s.get("children") or []]
    assert "break if solver.finish == length" in names
