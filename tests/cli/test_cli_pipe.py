"""A closed stdout (`srpo-dsl --help | head -1`) ends every command quietly: exit 0 or 141 (128 + SIGPIPE,
what a shell reports for `yes | head`), nothing on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srpo_dsl.api.runs import Run
from srpo_dsl.cli.main import COMMANDS
from tests.support.clitools import ROOT
from tests.support.lsptools import TYPO
from tests.support.training import ONE_POLICY_TEAM, train_env

QUIET_ENDS = (0, 141)


def closed_early(args: list[str], read: int, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`python -m srpo_dsl ARGS` with stdout a pipe this side closes after reading `read` bytes (0: at
    once, before the command writes anything, so every write finds it closed); exit code and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "srpo_dsl", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    if read:
        assert proc.stdout.read(read)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return proc.wait(timeout=600), err


@pytest.mark.parametrize("read", [0, 1])
@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_into_a_closed_pipe_ends_quietly(command: str, read: int) -> None:
    code, err = closed_early([command, "--help"] if command else ["--help"], read)
    assert code in QUIET_ENDS and err == "", (code, err)


@pytest.mark.parametrize("read", [0, 1])
def test_a_long_output_into_a_closed_pipe_ends_quietly(tmp_path: Path, read: int) -> None:
    """400 KB of graph (more than a pipe holds: the command is still writing when the pipe closes)."""
    source = (ROOT / "workflows" / "quickstart.srpo").read_text()
    source = source.replace('"quickstart/', f'"{ROOT}/workflows/quickstart/')
    source = source.replace("verify verifier ", "verify verifier\n" * 400 + "#")
    (tmp_path / "long.srpo").write_text(source)
    code, err = closed_early(["compile", str(tmp_path / "long.srpo"), "--emit", "json"], read)
    assert code in QUIET_ENDS, (code, err)
    assert "error" not in err and "Traceback" not in err, err


def lsp_message(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def test_the_language_server_whose_client_closed_stdout_ends_quietly() -> None:
    """The client reads a byte of the answer to `initialize`, closes its end of stdout, opens a workflow
    with an error (diagnostics to publish into the closed pipe), then closes stdin: gone."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "srpo_dsl", "lsp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    init = {"processId": None, "rootUri": None, "capabilities": {}}
    proc.stdin.write(lsp_message({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
    proc.stdin.flush()
    assert proc.stdout.read(1)
    proc.stdout.close()
    text = (ROOT / "workflows" / "quickstart.srpo").read_text().replace(*TYPO)
    document = {"uri": (ROOT / "broken.srpo").as_uri(), "languageId": "srpo", "version": 1, "text": text}
    proc.stdin.write(lsp_message({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
    opened = {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": document}}
    proc.stdin.write(lsp_message(opened))
    proc.stdin.flush()
    time.sleep(2)  # the diagnostics are published (into the closed pipe)
    proc.stdin.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) in QUIET_ENDS and "Traceback" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [[], ["--verbose"]])
def test_a_training_run_whose_stdout_closed_keeps_its_checkpoint(
    tmp_path: Path, tiny_random_model: Path, verbose: list[str]
) -> None:
    """Closed before the run starts (--verbose: the libraries' logs go to stdout during the run too)."""
    (tmp_path / "solver.j2").write_text("S {{ task.question }}=")
    (tmp_path / "aggregator.j2").write_text("A {{ task.question }}=")
    (tmp_path / "team.srpo").write_text(ONE_POLICY_TEAM)
    out = tmp_path / "run"
    args = ["train", str(tmp_path / "team.srpo"), "--model", str(tiny_random_model), "--device", "cpu"]
    code, err = closed_early([*args, "--out", str(out), *verbose], read=0, env=train_env())
    assert code in QUIET_ENDS and "error" not in err and "Traceback" not in err, (code, err[-3000:])
    assert [c.name for c in Run(out, []).checkpoints] == ["step-1"]
    assert not [p for p in out.rglob("*") if ".tmp" in p.name], "a file or folder left half written"
