"""Fuzzing: whatever the input, only the DSL error type escapes, always positioned inside the file."""

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from srpo_dsl.lang import analyze
from srpo_dsl.lang.syntax.messages import SrpoError
from srpo_dsl.lang.syntax.parser import parse
from tests.support.strategies import WORDS, WORKFLOWS, mutated_workflow


def _assert_positioned(text: str, file: str = "f.srpo") -> None:
    result = analyze(text, file, [WORKFLOWS])
    n_lines = max(1, len(text.splitlines()))
    for d in result.diagnostics:
        assert d.span.file == file
        assert 1 <= d.span.line <= n_lines + 1, d
        assert d.span.col >= 1
        assert d.code[0] in "EW" and d.code[1:].isdigit()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_random_text(text):
    _assert_positioned(text)
    with contextlib.suppress(SrpoError):
        parse(text, "f.srpo")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(WORDS), max_size=60).map(" ".join))
def test_token_soup(text):
    _assert_positioned("workflow w\n" + text)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_workflow())
def test_mutated_workflows(text):
    _assert_positioned(text)
