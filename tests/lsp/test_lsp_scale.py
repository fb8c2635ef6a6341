"""The language server's features grow linearly with the file (issue 49): code lens and completion
timed in process at a size and at four times it (the median of a few runs each; a linear feature
takes about 4x, a quadratic one 16x: the bound, 8x, leaves room for a loaded machine), and what the
lenses answer from while the text has a syntax error."""

from __future__ import annotations

import time
from collections.abc import Callable

from lsprotocol import types as lsp

from srpo_dsl.lsp.completion import completions
from srpo_dsl.lsp.diagnostics import diagnose
from srpo_dsl.lsp.lenses import code_lenses
from srpo_dsl.lsp.view import View
from tests.support.clitools import ROOT, load_bench

scale = load_bench("lsp_scale")
PATH = str(ROOT / "workflows" / "big.srpo")  # its templates resolve from workflows/
RUNS = 5


def _median(run: Callable[[], object]) -> float:
    return scale._median(run, RUNS)  # the bench's own timing


def _view(text: str) -> View:
    diags, good = diagnose(text, PATH)
    assert diags == [] and good is not None and good.graph is not None
    return View.of(good, text)


def test_the_generated_workflows_check_at_their_size():
    text = scale.workflow(600)
    assert abs(len(text.splitlines()) - 600) < scale.LOOP.count("\n")
    _view(text)


def test_code_lens_grows_linearly():
    """The lenses took 11.5 s at 5,000 lines: each step scanned every event node of the graph."""
    small, big = _view(scale.workflow(1000)), _view(scale.workflow(4000))
    assert len(code_lenses(big)) > 3 * len(code_lenses(small))
    ratio = _median(lambda: code_lenses(big)) / _median(lambda: code_lenses(small))
    assert ratio < 8, f"code lens at 4x the lines took {ratio:.1f}x the time"


def _complete_after(word: int) -> Callable[[], object]:
    text = scale.workflow(200) + "\nagent " + "w" * word + " "  # the cursor after the word and a space
    line = text.count("\n")
    return lambda: completions(text, line, len(text.split("\n")[-1]))


def test_completion_grows_linearly_with_the_word_being_typed():
    """Completion took 29 s after a 40,000-character word: a regex searched for the word being typed
    from every position before the cursor, each running over the long word to its end."""
    ratio = _median(_complete_after(32_000)) / _median(_complete_after(8_000))
    assert ratio < 8, f"completion after a word 4x as long took {ratio:.1f}x the time"
    started = time.perf_counter()
    _complete_after(40_000)()
    assert time.perf_counter() - started < 2.0


def test_lenses_answer_from_the_last_good_analysis_during_a_syntax_error():
    text = scale.workflow(100)
    good = _view(text)
    broken = text.replace("verify verifier\n", "verify verifier {{{\n", 1)
    assert diagnose(broken, PATH)[1] is None  # it does not parse
    during = code_lenses(View.of(good.good, broken))
    before = code_lenses(good)
    edited = broken.split("\n").index("    verify verifier {{{")
    assert len(during) == len(before) - 1  # all but the edited line's
    assert all(lens.range.start.line != edited for lens in during)
    assert during[0].command.title == before[0].command.title
    moved = [lsp.Position(line=lens.range.start.line, character=0) for lens in during]
    assert moved == sorted(moved)


def test_the_table_has_a_row_per_method_and_client_that_timed_it():
    sizes = [1000, 4000]
    raw = [{"diagnostics": 0.01, "links": 0.002}, {"diagnostics": 0.04, "links": 0.008}]
    nvim = [{"diagnostics": 0.2}, {"diagnostics": 0.8}]
    rows = scale.table(sizes, {scale.RAW: raw, "Neovim": nvim})
    assert rows[0] == "| method | client | 1,000 lines (ms) | 4,000 lines (ms) | growth exponent |"
    assert rows[2:] == [
        "| diagnostics | raw stdio | 10.0 | 40.0 | 1.00 |",
        "| diagnostics | Neovim | 200.0 | 800.0 | 1.00 |",
        "| links | raw stdio | 2.0 | 8.0 | 1.00 |",  # Neovim does not time links: no row
    ]
    assert scale.table([1000], {scale.RAW: raw[:1]})[2] == "| diagnostics | raw stdio | 10.0 | – |"


def test_an_editor_client_missing_here_is_skipped_with_why(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(scale.lsp_clients, "NVIM", str(tmp_path / "no-nvim"))
    assert scale.editor("Neovim", [tmp_path / "big.srpo"], ["hover"], 1) is None
    assert (
        capsys.readouterr().out
        == f"Neovim: skipped, `{tmp_path / 'no-nvim'}` is not installed (Debian: apt-get install neovim)\n"
    )


def test_the_editor_clients_time_methods_the_raw_client_times():
    assert set(scale.CLIENT_METHODS) <= set(scale.requests("", scale.workflow(100)))
    assert set(scale.SMOKE_METHODS) <= set(scale.CLIENT_METHODS)
