"""`srpo-dsl lsp` on templates and declarations, over the real server (issue 49, parts 5 and 6): hover
on every declaration kind of shipped workflows, `.j2` diagnostics that appear and clear, the template
variables' completion, hover and definition, path completion, signature help of user functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from srpo_dsl.lang.checks.schema import TEMPLATE_VARIABLES
from srpo_dsl.lang.usercode.pycode import USES
from srpo_dsl.lsp.files import files_under
from srpo_dsl.lsp.templatedoc import EPISODE
from tests.support.clitools import ROOT

WORKFLOWS = ROOT / "workflows"


def at(text: str, line_has: str, word: str, into: int = 1) -> dict:
    """The position `into` characters into the first `word` on the first line holding `line_has`."""
    lines = text.splitlines()
    line = next(i for i, x in enumerate(lines) if line_has in x)
    return {"line": line, "character": lines[line].index(word) + into}


def hover(client, uri: str, position: dict) -> str | None:
    found = client.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": position})
    return found["contents"]["value"] if found else None


def opened(client, path: Path) -> tuple[str, str]:
    text = path.read_text(encoding="utf-8")
    return client.open(path, text), text


@pytest.mark.editor
def test_hover_on_policies_tools_kinds_options_contracts_and_templates(client):
    uri, text = opened(client, WORKFLOWS / "quickstart_tools.srpo")
    policy = hover(client, uri, at(text, "policy lm", "lm"))
    assert "**policy** `lm`" in policy and 'builtin("tiny")' in policy and "temperature = 1.0" in policy
    assert "**policy kind** `builtin(name)`" in hover(client, uri, at(text, "policy lm", "builtin"))
    assert "**task kind** `arith`" in hover(client, uri, at(text, "task arith", "arith"))
    assert "`seed: int = 0`" in hover(client, uri, at(text, "task arith", "seed"))
    tool = hover(client, uri, at(text, "tool calc", "calc"))
    assert "**tool** `calc`" in tool and "def calc(" in tool and USES["tool"].shape in tool
    assert "**tool** `calc`" in hover(client, uri, at(text, "call calc on", "calc"))
    contract = hover(client, uri, at(text, "agent solver", "act("))
    assert "**output contract** `act(ACTION, ...)`" in contract
    assert "tokens per output" in hover(client, uri, at(text, "agent solver", "max_tokens"))
    template = hover(client, uri, at(text, "agent solver", "quickstart_tools/"))
    assert "**template**" in template and str(WORKFLOWS / "quickstart_tools" / "solver.j2") in template
    assert "learning rate" in hover(client, uri, at(text, "train with", "lr =")).lower()
    params = {"textDocument": {"uri": uri}, "position": at(text, "agent solver", "quickstart_tools/")}
    found = client.request("textDocument/definition", params)
    assert found["uri"] == (WORKFLOWS / "quickstart_tools" / "solver.j2").as_uri()


@pytest.mark.editor
def test_hover_on_environments(client):
    uri, text = opened(client, WORKFLOWS / "code_env.srpo")
    env = hover(client, uri, at(text, "env sandbox", "sandbox"))
    assert "**environment** `sandbox`" in env and "def run_tests(" in env and USES["env"].shape in env
    assert "**environment** `sandbox`" in hover(client, uri, at(text, "step sandbox on", "sandbox"))


@pytest.mark.editor
def test_template_diagnostics_appear_and_clear(client, tmp_path):
    role = tmp_path / "role.j2"
    role.write_text("{{ task.question }\n", encoding="utf-8")
    uri = client.open(role, role.read_text())
    [broken] = client.diagnostics(uri)
    assert broken["code"] == "E081" and broken["range"]["start"]["line"] == 0
    client.replace(uri, "Solve:\n{{ tsk.question }}\n", 2)
    [unknown] = client.diagnostics(uri)
    assert unknown["code"] == "E082" and unknown["range"]["start"]["line"] == 1
    assert "`tsk`" in unknown["message"] and "task" in unknown["message"].split("hint:")[1]
    client.replace(uri, 'Solve:\n{{ task.question }}\n{% include "part.j2" %}\n', 3)
    [missing] = client.diagnostics(uri)
    assert missing["code"] == "E080" and missing["range"]["start"]["line"] == 2
    (tmp_path / "part.j2").write_text("{{ history | length }}\n", encoding="utf-8")
    client.replace(uri, 'Solve:\n{{ task.question }}\n{% include "part.j2" %} \n', 4)
    assert client.diagnostics(uri) == []
    client.replace(uri, "Solve:\n{{ 9 ** 99999999 }}\n", 5)  # folding it held the server for minutes
    [big] = client.diagnostics(uri)
    assert big["code"] == "E081" and big["range"]["start"]["line"] == 1 and "bits" in big["message"]


@pytest.mark.editor
def test_template_variables_complete_hover_and_lead_to_the_executor(client):
    uri, text = opened(client, WORKFLOWS / "countdown" / "solver.j2")
    params = {"textDocument": {"uri": uri}, "position": at(text, "solver {{ replica", "{{ ", 3)}
    items = {i["label"]: i for i in client.request("textDocument/completion", params)["items"]}
    assert set(items) == set(TEMPLATE_VARIABLES) and items["new_history"]["detail"] == "list[dict]"
    params["position"] = at(text, "at most once", "You")
    assert client.request("textDocument/completion", params)["items"] == []
    tokens = client.request("textDocument/semanticTokens/full", {"textDocument": {"uri": uri}})
    assert tokens["data"] == []  # its words are not lexed as a workflow's
    shown = hover(client, uri, at(text, "solver {{ replica", "replica"))
    assert shown.startswith("**replica**: `int`") and TEMPLATE_VARIABLES["replica"].doc in shown
    params["position"] = at(text, "{{ pool_size", "pool_size")
    found = client.request("textDocument/definition", params)
    assert found["uri"] == EPISODE.as_uri()
    assert '"pool_size":' in EPISODE.read_text().splitlines()[found["range"]["start"]["line"]]


@pytest.mark.editor
def test_include_leads_to_the_included_template(client, tmp_path):
    (tmp_path / "part.j2").write_text("{{ task }}\n", encoding="utf-8")
    text = 'Hi\n{% include "part.j2" %}\nthe task: {{ task }}\n'
    uri = client.open(tmp_path / "role.j2", text)
    assert hover(client, uri, at(text, "the task", "task")) is None  # plain text, not a variable
    assert hover(client, uri, at(text, "the task", "{{ task", 4)).startswith("**task**: `dict`")
    params = {"textDocument": {"uri": uri}, "position": at(text, "include", "part")}
    assert client.request("textDocument/definition", params)["uri"] == (tmp_path / "part.j2").as_uri()
    params["position"] = at(text, "include", '"')
    labels = {i["label"] for i in client.request("textDocument/completion", params)["items"]}
    assert labels == {"part.j2"}


def labels(client, uri: str, position: dict) -> set[str]:
    params = {"textDocument": {"uri": uri}, "position": position}
    return {i["label"] for i in client.request("textDocument/completion", params)["items"]}


@pytest.mark.editor
def test_path_completion_lists_real_files_and_functions(client, routed):
    text = routed.read_text()
    uri = client.open(routed, text)
    templates = {p.relative_to(routed.parent).as_posix() for p in routed.parent.rglob("*.j2")}
    assert labels(client, uri, at(text, "agent solver", '"math/', 6)) == templates
    uri, text = opened(client, WORKFLOWS / "countdown.srpo")
    functions = labels(client, uri, at(text, 'emits "countdown', "countdown.py:", 14))
    assert {"make_tasks", "parse_expression", "reward"} <= functions
    files = labels(client, uri, at(text, 'reward "', '"', 1))
    assert "countdown.py:" in files and all(f.endswith(".py:") for f in files)
    uri, text = opened(client, WORKFLOWS / "quickstart_tools.srpo")
    position = at(text, "tool calc", "calc.py:", 8)
    params = {"textDocument": {"uri": uri}, "position": position}
    [calc] = client.request("textDocument/completion", params)["items"]
    start = text.splitlines()[position["line"]].index('"') + 1
    assert calc["label"] == "calc" and calc["textEdit"]["newText"] == "calc"
    assert calc["textEdit"]["range"]["start"] == {
        "line": position["line"],
        "character": start + len("quickstart_tools/calc.py:"),
    }
    uri, text = opened(client, WORKFLOWS / "code_env.srpo")
    assert labels(client, uri, at(text, "task jsonl", "code_env/", 3)) == set()  # a data file's string


@pytest.mark.editor
def test_signature_help_lists_the_parameters_a_hook_receives(client):
    uri, text = opened(client, WORKFLOWS / "countdown.srpo")

    def signature(line_has: str, word: str) -> dict | None:
        params = {"textDocument": {"uri": uri}, "position": at(text, line_has, word, 3)}
        return client.request("textDocument/signatureHelp", params)

    [reward] = signature('reward "', "countdown.py:reward")["signatures"]
    assert reward["label"] == USES["reward"].shape
    assert [p["label"] for p in reward["parameters"]] == ["answer", "row", "episode"]
    assert "def reward(answer: str | None, row: dict) -> float" in reward["documentation"]["value"]
    [parser] = signature('emits "countdown', "countdown.py:parse")["signatures"]
    assert [p["label"] for p in parser["parameters"]] == ["text", "finish"]
    [loader] = signature("task ", "countdown.py:make")["signatures"]
    assert loader["label"] == USES["loader"].shape
    assert signature("policy lm", "Qwen") is None


def test_listed_files_skip_hidden_folders_and_stop_early(tmp_path):
    for rel in ["a.j2", "sub/b.jinja", ".hidden/c.j2", "sub/.d.j2", "x.py", "z/y.j2", "node_modules/e.j2"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("", encoding="utf-8")
    assert files_under(tmp_path, (".j2", ".jinja")) == ["a.j2", "sub/b.jinja", "z/y.j2"]
    assert files_under(tmp_path, (".j2", ".jinja"), limit=2) == ["a.j2"]
