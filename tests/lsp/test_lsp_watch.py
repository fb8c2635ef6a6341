"""`srpo-dsl lsp` keeps an open workflow's diagnostics equal to `validate`'s while its templates change on
disk (srpo_dsl/lsp/watch.py), with the real server over stdio: a client that offers file watching (the
server registers for `workspace/didChangeWatchedFiles`; it is told of each change and does not poll), and
one that does not (the server looks at the files every 0.2 s). Each test changes the files, runs
`srpo-dsl validate` on them, and waits until the server publishes the same diagnostics."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.clitools import ROOT, load_bench
from tests.support.lang_cases import BASE, TEMPLATES
from tests.support.lsptools import as_lsp, published, validate_json

pytestmark = pytest.mark.editor

LspClient = load_bench("lsp_client").LspClient

WORKFLOW = BASE.replace('agent agg uses lm prompt "p.j2"', 'agent agg uses lm prompt "t/agg.j2"')
GOOD = "{{ task.question }}\n"
BAD = {"E082": "{{ task.question }}\n{{ nosuchvar }}\n", "E081": "{{ task.question }\n"}
WATCHING = {"workspace": {"didChangeWatchedFiles": {"dynamicRegistration": True}}}
CREATED, CHANGED, DELETED = 1, 2, 3  # LSP's FileChangeType
NO_DAC_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


@pytest.fixture(scope="module")
def watching():
    """A client that offers `workspace/didChangeWatchedFiles`; the server does not poll (`--poll 0`)."""
    c = LspClient(["--poll", "0"])
    c.initialize(ROOT, WATCHING)
    request = c.receive(lambda m: m.get("method") == "client/registerCapability")
    (registration,) = request["params"]["registrations"]
    assert registration["method"] == "workspace/didChangeWatchedFiles"
    patterns = {w["globPattern"] for w in registration["registerOptions"]["watchers"]}
    assert {"**/*.j2", "**/*.py"} <= patterns
    c.reply(request)
    c.watches = True
    yield c
    c.close()


@pytest.fixture(scope="module")
def polled():
    """A client that offers no file watching: the server looks at the files every 0.2 s."""
    c = LspClient(["--poll", "0.2"])
    c.initialize(ROOT)
    c.watches = False
    yield c
    c.close()


@pytest.fixture(params=["watching", "polled"])
def client(request):
    return request.getfixturevalue(request.param)


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    """w.srpo: the golden-case workflow whose agent `agg` reads `t/agg.j2` (the others `p.j2`)."""
    (tmp_path / "p.j2").write_text(TEMPLATES["p.j2"])
    (tmp_path / "t").mkdir()
    (tmp_path / "w.srpo").write_text(WORKFLOW)
    return tmp_path / "w.srpo"


def changed(client, path: Path, kind: int = CHANGED) -> None:
    """Tell a watching client's server of the change, as the editor would; the polled one finds it."""
    if client.watches:
        client.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": path.as_uri(), "type": kind}]})


def as_validate(client, uri: str, workflow: Path, prefix: list[str] | None = None) -> list[dict]:
    """Wait (30 s at most) until the server publishes for `uri` what `validate` says of `workflow` now."""
    expected = [as_lsp(d) for d in validate_json(workflow, prefix or [])]
    deadline = time.monotonic() + 30
    last = None
    while True:
        try:
            note = client.receive(
                lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri,
                timeout=deadline - time.monotonic(),
            )
        except queue.Empty:
            pytest.fail(f"the server never published validate's {expected}; last published: {last}")
        last = published(note["params"]["diagnostics"])
        if last == expected:
            return last


def codes(diags: list[dict]) -> list[str]:
    return [d["code"] for d in diags]


@pytest.mark.parametrize("code", ["E082", "E081"])
def test_fixing_a_template_clears_its_error(client, workflow, code):
    """A variable no step provides (E082), a Jinja syntax error (E081): fixed on disk, the error goes."""
    template = workflow.parent / "t" / "agg.j2"
    template.write_text(BAD[code])
    uri = client.open(workflow, WORKFLOW)
    assert codes(as_validate(client, uri, workflow)) == [code]
    template.write_text(GOOD)
    changed(client, template)
    assert as_validate(client, uri, workflow) == []


def test_creating_and_deleting_a_template(client, workflow):
    """A missing template (E080) is found once created; deleted again, it is E080 again."""
    template = workflow.parent / "t" / "agg.j2"
    uri = client.open(workflow, WORKFLOW)
    assert codes(as_validate(client, uri, workflow)) == ["E080"]
    template.write_text(GOOD)
    changed(client, template, CREATED)
    assert as_validate(client, uri, workflow) == []
    template.unlink()
    changed(client, template, DELETED)
    assert codes(as_validate(client, uri, workflow)) == ["E080"]


@pytest.fixture
def unprivileged(tmp_path: Path) -> list[str]:
    """The prefix that makes a process see folder permissions: none for a user, `setpriv` dropping
    root's override of them for root (root reads a `chmod 000` folder otherwise)."""
    if os.geteuid() != 0:
        return []
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    probe = [*NO_DAC_OVERRIDE, sys.executable, "-c", "import os, sys; os.listdir(sys.argv[1])", str(locked)]
    try:
        denied = shutil.which("setpriv") and subprocess.run(probe, capture_output=True).returncode != 0
    finally:
        locked.rmdir()
    if not denied:
        pytest.skip("cannot run a process that root's permission override does not apply to")
    return NO_DAC_OVERRIDE


def test_an_unreadable_template_folder(unprivileged, workflow):
    """A template whose folder cannot be searched is E081 "cannot be read" (not E080 "not found"); hover
    says so and go to definition finds nothing (no error); once readable again, the error goes (no file
    event tells of a folder's permissions: the poll finds it)."""
    template = workflow.parent / "t" / "agg.j2"
    template.write_text(GOOD)
    client = LspClient(["--poll", "0.2"], prefix=unprivileged)
    try:
        client.initialize(ROOT)
        template.parent.chmod(0)
        uri = client.open(workflow, WORKFLOW)
        (diag,) = as_validate(client, uri, workflow, unprivileged)
        assert diag["code"] == "E081" and "cannot be read: Permission denied" in diag["message"]
        line = WORKFLOW.splitlines().index('agent agg uses lm prompt "t/agg.j2" emits final_boxed')
        at = {"textDocument": {"uri": uri}, "position": {"line": line, "character": 7}}
        assert (
            '"t/agg.j2" (cannot be read: Permission denied)'
            in client.request("textDocument/hover", at)["contents"]["value"]
        )
        at["position"]["character"] = WORKFLOW.splitlines()[line].index("t/agg.j2") + 1
        assert client.request("textDocument/definition", at) is None
        template.parent.chmod(0o755)
        assert as_validate(client, uri, workflow, unprivileged) == []
        assert client.request("textDocument/definition", at)["uri"] == template.as_uri()
    finally:
        template.parent.chmod(0o755)
        client.close()


def test_an_unreadable_python_folder_is_e092(unprivileged, tmp_path):
    """A Python file in a folder that cannot be searched: E092 "cannot read" from `validate` and the server
    (it was an internal error)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "r.py").write_text("def reward(answer, row):\n    return 1.0\n")
    (tmp_path / "p.j2").write_text(TEMPLATES["p.j2"])
    text = BASE.replace("reward math_equiv(agg, task.answer)", 'reward "code/r.py:reward"(agg)')
    workflow = tmp_path / "w.srpo"
    workflow.write_text(text)
    client = LspClient(["--poll", "0.2"], prefix=unprivileged)
    try:
        client.initialize(ROOT)
        code.chmod(0)
        uri = client.open(workflow, text)
        (diag,) = as_validate(client, uri, workflow, unprivileged)
        assert diag["code"] == "E092" and diag["message"].endswith("r.py: Permission denied")
        code.chmod(0o755)
        assert as_validate(client, uri, workflow, unprivileged) == []
    finally:
        code.chmod(0o755)
        client.close()
