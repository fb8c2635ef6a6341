"""`srpo-dsl lsp` end to end: a JSON-RPC client over stdio to the server in a subprocess."""

from __future__ import annotations

import re
import shutil
import statistics
from pathlib import Path

import pytest

from srpo_dsl.lang.checks.schema import SAMPLING_DEFAULTS, AgentOptions, TrainOptions
from srpo_dsl.lang.tooling.format import format_source
from tests.support.clitools import ROOT, load_bench
from tests.support.lsptools import as_lsp, published, validate_json

LspClient = load_bench("lsp_client").LspClient

WORKFLOWS = ROOT / "workflows"
TYPO = ("parallel solver by router", "parallel solvers by router")


@pytest.mark.editor
def test_the_server_takes_stdio_as_language_clients_start_it() -> None:
    # vscode-languageclient starts a server over stdio as `COMMAND --stdio` (issue 37).
    c = LspClient(["--stdio"])
    try:
        capabilities = c.initialize(ROOT)["capabilities"]
    finally:
        c.close()
    assert capabilities["documentFormattingProvider"] and c.proc.returncode == 0


@pytest.mark.editor
def test_diagnostics_are_validates_and_clear_on_fix(client, routed):
    good = routed.read_text()
    broken = good.replace(*TYPO)
    routed.write_text(broken)
    uri = client.open(routed, broken)
    diags = client.diagnostics(uri)
    assert published(diags) == [as_lsp(d) for d in validate_json(routed)]
    e012 = next(d for d in diags if d["code"] == "E012")
    line = broken.splitlines().index(next(x for x in broken.splitlines() if TYPO[1] in x))
    start = broken.splitlines()[line].index("solvers")
    assert e012["range"] == {
        "start": {"line": line, "character": start},
        "end": {"line": line, "character": start + len("solvers")},
    }
    assert "did you mean `solver`?" in e012["message"] and e012["source"] == "srpo-dsl"
    client.replace(uri, good, 2)
    assert client.diagnostics(uri) == []


@pytest.mark.editor
def test_syntax_errors_and_python_references_as_validate(client, tmp_path):
    for name in ("solver_judge.srpo", "solver_judge.py"):
        shutil.copy(WORKFLOWS / name, tmp_path)
    shutil.copytree(WORKFLOWS / "solver_judge", tmp_path / "solver_judge")
    path = tmp_path / "solver_judge.srpo"
    text = path.read_text().replace("solver_judge.py:reward", "solver_judge.py:rewards")
    path.write_text(text)
    uri = client.open(path, text)
    diags = client.diagnostics(uri)
    assert [d["code"] for d in diags] == ["E093"]
    assert published(diags) == [as_lsp(d) for d in validate_json(path)]
    broken = text.replace("agent ", "agent = ", 1)
    path.write_text(broken)
    client.replace(uri, broken, 2)
    diags = client.diagnostics(uri)
    assert diags and published(diags) == [as_lsp(d) for d in validate_json(path)]


@pytest.mark.editor
def test_formatting(client, routed):
    messy = (
        routed.read_text()
        .replace("repeat at most 4 {", "repeat   at most 4{")
        .replace("    verify", "verify")
    )
    assert format_source(messy) != messy
    uri = client.open(routed, messy)
    client.diagnostics(uri)
    options = {"tabSize": 4, "insertSpaces": True}
    edits = client.request("textDocument/formatting", {"textDocument": {"uri": uri}, "options": options})
    lines = messy.split("\n")
    whole = {
        "start": {"line": 0, "character": 0},
        "end": {"line": len(lines) - 1, "character": len(lines[-1])},
    }
    assert edits == [{"range": whole, "newText": format_source(messy)}]
    client.replace(uri, format_source(messy), 2)
    assert client.request("textDocument/formatting", {"textDocument": {"uri": uri}, "options": options}) == []
    client.replace(uri, messy.replace("workflow ", "workflow = "), 3)
    assert client.request("textDocument/formatting", {"textDocument": {"uri": uri}, "options": options}) == []


def _position(text: str, line_has: str, word: str) -> dict:
    lines = text.splitlines()
    line = next(i for i, x in enumerate(lines) if line_has in x)
    return {"line": line, "character": lines[line].index(word) + 1}


@pytest.mark.editor
def test_symbols_definition_and_hover(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    client.diagnostics(uri)
    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    (workflow,) = symbols
    names = [s["name"] for s in workflow["children"]]
    assert workflow["name"] == "math_routed"
    assert {"router", "solver[3]", "verifier", "aggregator", "lm", "train"} <= set(names)
    assert "parallel solver" in [c["name"] for s in workflow["children"] for c in s.get("children") or []]

    at = {"textDocument": {"uri": uri}, "position": _position(text, "parallel solver", "solver")}
    found = client.request("textDocument/definition", at)
    agent_line = next(i for i, x in enumerate(text.splitlines()) if x.startswith("agent solver"))
    assert found["uri"] == uri and found["range"]["start"] == {"line": agent_line, "character": 6}

    at["position"] = _position(text, "agent solver", "math/solver.j2")
    found = client.request("textDocument/definition", at)
    assert found["uri"] == (routed.parent / "math" / "solver.j2").resolve().as_uri()

    at["position"] = _position(text, "parallel solver", "solver")
    shown = client.request("textDocument/hover", at)["contents"]["value"]
    assert "`lm`" in shown and 'hf("Qwen/Qwen3-4B")' in shown and "math/solver.j2" in shown
    assert "boxed" in shown and "K in 1..3" in shown
    assert client.request("textDocument/hover", {**at, "position": {"line": 0, "character": 0}}) is None


@pytest.mark.editor
def test_python_reference_definition_and_hover(client, tmp_path):
    for name in ("solver_judge.srpo", "solver_judge.py"):
        shutil.copy(WORKFLOWS / name, tmp_path)
    path = tmp_path / "solver_judge.srpo"
    text = path.read_text()
    uri = client.open(path, text)
    client.diagnostics(uri)
    at = {"textDocument": {"uri": uri}, "position": _position(text, "solver_judge.py:reward", 'reward"')}
    found = client.request("textDocument/definition", at)
    py = (tmp_path / "solver_judge.py").read_text().splitlines()
    assert found["uri"] == (tmp_path / "solver_judge.py").resolve().as_uri()
    assert py[found["range"]["start"]["line"]].startswith("def reward(")
    shown = client.request("textDocument/hover", at)["contents"]["value"]
    assert "def reward(" in shown


@pytest.mark.editor
def test_definition_of_a_policy_a_tool_and_a_tool_s_function(client, tmp_path):
    shutil.copytree(WORKFLOWS / "quickstart_tools", tmp_path / "quickstart_tools")
    path = Path(shutil.copy(WORKFLOWS / "quickstart_tools.srpo", tmp_path))
    text = path.read_text()
    lines = text.splitlines()
    uri = client.open(path, text)
    client.diagnostics(uri)

    def definition(line_has: str, word: str) -> dict:
        at = {"textDocument": {"uri": uri}, "position": _position(text, line_has, word)}
        return client.request("textDocument/definition", at)

    found = definition("agent solver", " lm ")  # `uses lm`: the policy's declaration
    assert found["uri"] == uri and lines[found["range"]["start"]["line"]].startswith("policy lm =")
    found = definition("call calc on solver", "calc")  # the tool's declaration
    assert found["uri"] == uri and lines[found["range"]["start"]["line"]].startswith("tool calc =")
    found = definition("tool calc", "calc.py")  # the tool's Python function: its `def` line
    py = (tmp_path / "quickstart_tools" / "calc.py").read_text().splitlines()
    assert found["uri"] == (tmp_path / "quickstart_tools" / "calc.py").resolve().as_uri()
    assert py[found["range"]["start"]["line"]].startswith("def calc(")


@pytest.mark.editor
def test_an_environment_that_selects_and_says_words_is_a_definition_and_a_symbol(client, tmp_path):
    """tree_of_thoughts.srpo: `by tree` and `until tree == solved` name the environment, not an agent."""
    shutil.copytree(WORKFLOWS / "tree_of_thoughts", tmp_path / "tree_of_thoughts")
    for name in ("tree_of_thoughts.srpo", "tree_of_thoughts.py"):
        shutil.copy(WORKFLOWS / name, tmp_path)
    path = tmp_path / "tree_of_thoughts.srpo"
    text = path.read_text()
    lines = text.splitlines()
    uri = client.open(path, text)
    assert client.diagnostics(uri) == []
    for line_has in ("parallel proposer by tree", "} until tree == solved", "step tree on proposer"):
        at = {"textDocument": {"uri": uri}, "position": _position(text, line_has, "tree")}
        found = client.request("textDocument/definition", at)
        assert found["uri"] == uri and lines[found["range"]["start"]["line"]].startswith("env tree =")
    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    steps = [s["name"] for s in symbols[0]["children"]]
    assert "step tree" in steps and "repeat at most 6" in steps


@pytest.mark.editor
def test_hover_on_a_step_gives_its_cost_bounds(client):
    """supervisor.srpo: `act researcher` is in a loop of 3 inside a loop of 4 (12 times an episode).
    A round of the outer loop: `act supervisor` (1 event), then one supervisor turn takes one decision,
    so of `if supervisor == research` (3 events, 3 tool calls) and `if supervisor == compute` (1 event,
    1 tool call) one runs: the round costs 1 + max(3, 1) = 4 events and max(3, 1) = 3 tool calls (not
    1 + 3 + 1 and 3 + 1: the two arms cannot both run). The episode: 4 x 4 + 1 (the forced finish) =
    17 events and model calls, 4 x 3 = 12 tool calls, 17 x 512 = 8704 tokens."""
    path = WORKFLOWS / "supervisor.srpo"  # opened, never written
    text = path.read_text()
    uri = client.open(path, text)
    client.diagnostics(uri)

    def shown(line_has: str, word: str) -> str:
        at = {"textDocument": {"uri": uri}, "position": _position(text, line_has, word)}
        return client.request("textDocument/hover", at)["contents"]["value"]

    episode = "the whole episode, at most: events 17 · model calls 17 · tool calls 12 · generated tokens 8704"
    researcher = shown("act researcher", "act")
    assert researcher.startswith("**act researcher**") and episode in researcher
    assert "once: events 1 · model calls 1 · tool calls 0 · generated tokens 512" in researcher
    assert "at most 12 times an episode" in researcher and "events 12 · model calls 12" in researcher
    call = shown("call search on researcher", "call")
    assert call.startswith("**call search on researcher**") and "tool calls 12 ·" in call
    loop = shown("repeat at most 4", "repeat")
    assert "once: events 16 · model calls 16 · tool calls 12 · generated tokens 8192" in loop
    assert "times an episode" not in loop
    assert "once: events 1 " in shown("act supervisor only finish", "act")


def test_every_train_option_is_documented_once_for_completion_and_docs():
    """Each `train with` option's description (completion's documentation) exists, and docs/dsl.md's
    table has a row naming it with its default."""
    table = (ROOT / "docs" / "dsl.md").read_text().split("### `train with (...)`")[1].split("## Steps")[0]
    rows = [r.split("|")[1:3] for r in table.splitlines() if r.startswith("| `")]
    for name, info in TrainOptions.model_fields.items():
        assert info.description, f"TrainOptions.{name} has no description"
        names, cell = next(([n, d] for n, d in rows if f"`{name}`" in n), (None, None))
        assert names is not None, f"docs/dsl.md: no row for `{name}`"
        defaults = [d.strip(" `") for d in cell.split(",")]
        listed = re.findall(r"`(\w+)`", names)
        shown = defaults[listed.index(name)] if len(defaults) == len(listed) else defaults[0]
        if isinstance(info.default, bool):  # written as the DSL writes it
            assert shown == str(info.default).lower(), (name, cell)
        elif isinstance(info.default, (int, float)):
            assert float(shown) == info.default, (name, cell)
        elif info.default is not None:
            assert shown == info.default, (name, cell)


@pytest.mark.editor
def test_completion(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    client.diagnostics(uri)
    line = next(i for i, x in enumerate(text.splitlines()) if x.startswith("train with ("))
    at = {"textDocument": {"uri": uri}, "position": {"line": line, "character": len("train with (")}}
    items = {i["label"]: i for i in client.request("textDocument/completion", at)["items"]}
    assert "lr" in items and "1e-06" in items["lr"]["detail"]
    assert items["group"]["documentation"] == "rollouts per prompt (G)"
    assert "router" not in items


@pytest.mark.editor
def test_completion_in_an_agents_options(client, routed):
    text = routed.read_text().replace("emits final_boxed", "emits final_boxed with (max_tokens = 9, ", 1)
    routed.write_text(text)
    uri = client.open(routed, text)
    line = next(i for i, x in enumerate(text.splitlines()) if "max_tokens = 9, " in x)
    at = {"textDocument": {"uri": uri}, "position": {"line": line, "character": len(text.splitlines()[line])}}
    items = {i["label"]: i for i in client.request("textDocument/completion", at)["items"]}
    assert set(items) == set(AgentOptions.model_fields)
    assert items["retries"]["documentation"] == AgentOptions.model_fields["retries"].description
    assert items["stop"]["detail"].endswith("= 'pool'") and "lr" not in items


def test_every_agent_option_is_documented_for_completion_and_docs():
    """Each agent option has a description (completion's documentation) and docs/dsl.md names it: the
    sampling settings in the agent declaration, the others in their table with their default."""
    section = (ROOT / "docs" / "dsl.md").read_text().split("## Generating and training")[1].split("\n## ")[0]
    rows = {
        r.split("|")[1].strip(" `").split(" ")[0]: r.split("|")[2].strip(" `")
        for r in section.splitlines()
        if r.startswith("| `")
    }
    for name, info in AgentOptions.model_fields.items():
        assert info.description, f"AgentOptions.{name} has no description"
        if name not in ("temperature", "top_p", "max_tokens"):
            default = SAMPLING_DEFAULTS.get(name, info.default)
            assert name in rows, f"docs/dsl.md: no row for `{name}`"
            assert rows[name] == ("none" if default in (None, ()) else str(default).lower()), name


@pytest.mark.editor
def test_latency_from_change_to_diagnostics(client):
    """The median time from didChange to publishDiagnostics on each shipped workflow (bench/lsp_bench.py)."""
    bench = load_bench("lsp_bench")
    latencies = bench.change_latencies(client, sorted(WORKFLOWS.glob("*.srpo")), edits=7)
    medians = {name: statistics.median(times) * 1000 for name, times in latencies.items()}
    assert medians and max(medians.values()) < 50, medians
