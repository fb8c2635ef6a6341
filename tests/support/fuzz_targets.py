"""What the fuzzer's targets do wrong with a case, if anything: a mutated workflow in the Python entry points
(`api_problem`), on the command line (`cli_problem`) and in the language server (`lsp_problem`); a
corrupted run folder in `view`, `audit` and the sweep's readers (`run_problem`). The tests and
bench/fuzz_report.py share them."""

from __future__ import annotations

import contextlib
import io
import shutil

from srpo_dsl.cli.main import outcome
from srpo_dsl.lang.analysis import analyze
from srpo_dsl.lang.syntax.messages import SrpoError
from srpo_dsl.lang.tooling.format import format_source
from srpo_dsl.runfolder import RunError
from srpo_dsl.sweep.dynamics import read_run_dynamics
from srpo_dsl.sweep.results import read_run
from tests.support.clitools import cli
from tests.support.fuzzing import RUN, WORKFLOWS, Case, corrupt_run
from tests.support.lsptools import OPTIONS


def _keys(text: str) -> list[tuple[str, str]]:
    return [(d.code, d.message) for d in analyze(text, "w.srpo", [WORKFLOWS[0].parent]).diagnostics]


def api_problem(data: bytes) -> str | None:
    """What the Python entry points do wrong with `data`: fmt not idempotent or losing diagnostics."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None  # not text: the commands say so (`cli_problem`)
    try:
        once = format_source(text, "w.srpo")
    except SrpoError:
        return None
    if format_source(once, "w.srpo") != once:
        return "fmt is not idempotent"
    before, after = _keys(text), _keys(once)
    return None if before == after else f"fmt changed the diagnostics: {before} -> {after}"


def cli_problem(data: bytes, folder, run=None) -> str | None:
    """An exit 3 or a traceback of validate, fmt --check or compile (`run`: in-process by default)."""
    path = folder / "w.srpo"
    path.write_bytes(data)
    for args in (["validate", path], ["fmt", "--check", path], ["compile", path, "-o", folder / "g.json"]):
        code, said = run(args) if run else _in_process(args)
        if code == 3 or "Traceback" in said:
            return f"{args[0]}: exit {code}: {said[-400:]}"
    return None


def _in_process(args, capsys=None) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = outcome([str(a) for a in args])
    return code, err.getvalue() + out.getvalue()


def in_subprocess(args) -> tuple[int, str]:
    done = cli(*args, timeout=60)
    return done.returncode, done.stderr + done.stdout


def lsp_problem(client, folder, data: bytes, version: int) -> str | None:
    """A request the server leaves unanswered (the client's wait fails) or answers with an error."""
    text = data.decode("utf-8", errors="replace")
    uri = client.open(folder / f"lsp{version}.srpo", text)
    client.diagnostics(uri)
    doc = {"textDocument": {"uri": uri}}
    lines = text.split("\n")
    middle = {"line": len(lines) // 2, "character": len(lines[len(lines) // 2]) // 2}
    for method, extra in [
        ("textDocument/formatting", {"options": OPTIONS}),
        ("textDocument/completion", {"position": middle}),
        ("textDocument/hover", {"position": middle}),
        ("textDocument/documentSymbol", {}),
    ]:
        client.request(method, {**doc, **extra})
    client.notify("textDocument/didClose", doc)
    return None


def command_stderr(args) -> tuple[int, str]:
    """The exit status and stderr of `srpo-dsl ARGS` run in this process (what it prints to stdout dropped)."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = outcome([str(a) for a in args])
    return code, err.getvalue()


def run_problem(case: Case, folder) -> str | None:
    """What `view`, `audit` or a sweep reader does wrong with the case's corrupted run folder."""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(RUN, folder)
    (folder / case.base.name).write_bytes(corrupt_run(case))
    for args in (["view", folder, "-o", folder / "v.html"], ["audit", folder / "traces.jsonl"]):
        code, said = command_stderr(args)
        if code == 3 or "Traceback" in said or (code and len(said.strip().splitlines()) != 1):
            return f"{args[0]}: exit {code}: {said[-400:]}"
    for reader in (lambda: read_run(folder, 0, 0.0), lambda: read_run_dynamics(folder, 0)):
        try:
            reader()
        except (RunError, ValueError) as exc:  # the sweep's one line for a run it cannot read
            if "\n" in str(exc):
                return f"a sweep reader's message is not one line: {exc}"
        except Exception as exc:
            return f"a sweep reader: {type(exc).__name__}: {exc}"
    return None
