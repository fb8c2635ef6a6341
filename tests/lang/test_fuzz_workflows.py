"""Mutated shipped workflows (tests/support/fuzzing.py) through `validate`, `fmt` and `compile` in-process, a
sample through the real command line and the language server: no traceback, no exit 3, every request
answered, `fmt` idempotent and keeping the diagnostics."""

from __future__ import annotations

import pytest

from srpo_dsl.lang.analysis import analyze
from tests.support.fuzz_targets import api_problem, cli_problem, in_subprocess, lsp_problem
from tests.support.fuzzing import WORKFLOW_OPS, WORKFLOWS, Case, cases, mutate_workflow, shrink

CASES = cases(WORKFLOWS, WORKFLOW_OPS, default=100)
SAMPLE = CASES[:: max(1, len(CASES) // 6)]  # the command line and the server: a few


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder beside which a mutated workflow finds what the shipped ones refer to (templates, code)."""
    out = tmp_path_factory.mktemp("fuzz")
    for entry in WORKFLOWS[0].parent.iterdir():
        if entry.suffix != ".srpo":
            (out / entry.name).symlink_to(entry)
    return out


def check(case: Case, problem) -> None:
    """Fail with the case's seed and its smallest reproduction when `problem(bytes)` finds one."""
    found = problem(mutate_workflow(case))
    if found:
        small = shrink(case, lambda c: problem(mutate_workflow(c)) is not None)
        pytest.fail(f"{found}\n{small.describe(mutate_workflow(small))}")


@pytest.mark.slow
def test_mutated_workflows_in_process(folder):
    for case in CASES:
        check(case, api_problem)
        check(case, lambda data: cli_problem(data, folder))


@pytest.mark.slow
def test_mutated_workflows_on_the_command_line(folder):
    for case in SAMPLE:
        check(case, lambda data: cli_problem(data, folder, in_subprocess))


@pytest.mark.editor
@pytest.mark.slow
def test_mutated_workflows_in_the_language_server(client, folder):
    for n, case in enumerate(SAMPLE):
        try:
            lsp_problem(client, folder, mutate_workflow(case), n)
        except Exception as exc:  # an unanswered request (queue.Empty) or an error reply
            pytest.fail(
                f"language server: {type(exc).__name__}: {exc}\n{case.describe(mutate_workflow(case))}"
            )


def test_a_nul_in_a_template_name_is_a_missing_template():
    """Found by the fuzzer (2,000 cases, seed 48): a NUL in a template's name raised ValueError out of
    `analyze` (os.stat); it is a template that does not exist, one diagnostic."""
    text = (WORKFLOWS[0].parent / "quickstart.srpo").read_text()
    name = text.split('"')[1]
    found = analyze(text.replace(name, name[:2] + "\x00" + name[2:], 1), "w.srpo", [WORKFLOWS[0].parent])
    assert found.diagnostics


def test_a_syntax_error_among_200_nested_blocks_is_diagnosed():
    """Found by bench/fuzz_report.py at 2,000 cases (seed 48, case 1680, in the language server): the check
    for a block left open deep-copied the parser's 200-deep trees and overflowed Python's recursion
    (RecursionError out of `analyze`, which never raises); it now copies the states, not the trees."""
    base = next(p for p in WORKFLOWS if p.name == "math_python.srpo")
    ops = [
        ("spice", 889626331, 270771051),
        ("identifier", 961230542, 496204797),
        ("nesting", 879660426, 445341166),
    ]
    text = mutate_workflow(Case(48, 1680, base, ops)).decode("utf-8", errors="replace")
    assert [d.code for d in analyze(text, "w.srpo").diagnostics] == ["E002", "E001"]
