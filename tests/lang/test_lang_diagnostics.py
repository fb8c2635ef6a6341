"""Golden diagnostics: every error code, its message, line and column, and the rendering."""

from pathlib import Path

import pytest

from srpo_dsl.lang import analyze
from srpo_dsl.lang.syntax.messages import render_github, render_pretty
from tests.support.lang_cases import BASE, MUTATIONS, TEMPLATES, mutate

GOLDEN = [
    ("E001", 13, 10, "unexpected `3` (expected a name)"),
    ("E002", 6, 32, "unterminated string"),
    ("E003", 17, 10, "unexpected end of file (expected a name)"),
    ("E004", 9, 19, "unexpected `emits` (expected `prompt`)"),
    ("E005", 10, 8, "unexpected `2` (expected `at` or `{`)"),
    ("E006", 2, 11, "unexpected `hf` (expected `=`)"),
    (  # at the end of `} until verifier` (line 16), where `== WORD` is missing, not at the next line's token
        "E007",
        16,
        17,
        "incomplete statement (expected `.` or `==` or `!=`): the next token, `aggregate` on line 17, cannot continue it",
    ),
    ("E008", 17, 1217, "blocks nested more than 64 deep"),  # the 65th `repeat` of one line
    ("E010", 9, 7, "`solver` is already defined (line 6)"),
    ("E011", 9, 16, "undefined policy `llm`"),
    ("E012", 17, 11, "undefined agent `agr`"),
    ("E013", 15, 8, "undefined tool `wbe`"),
    ("E014", 15, 8, "undefined environment `wbe`"),
    ("E020", 2, 13, "unknown policy kind `hff`"),
    ("E021", 3, 6, "unknown task kind `maths`"),
    ("E022", 4, 12, "unknown tool kind `bm26`"),
    ("E023", 9, 57, "unknown option `max_token` for agent `agg`"),
    ("E024", 9, 57, "agent `agg`: `max_tokens` must be greater than or equal to 1"),
    ("E025", 1, 10, "the workflow declares no `task`"),
    ("E026", 1, 10, "the workflow declares no `reward`"),
    ("E027", 19, 1, "only one `train` block is allowed"),
    ("E028", 18, 8, "unknown reward function `math_equal`"),
    ("E029", 18, 24, "the reference answer is a task field: `task.FIELD`"),
    ("E030", 9, 39, "unknown output contract `final_box`"),
    ("E031", 9, 39, "`final_boxed` takes no arguments"),
    ("E032", 7, 61, "`verdict` word `approve` is listed twice"),
    ("E040", 6, 7, "pool `solver` must have at least 1 replica"),
    ("E041", 14, 3, "replica 3 is out of range: `searcher` has 2 replica(s)"),
    ("E042", 14, 3, "replica 2 is selected twice"),
    ("E043", 12, 24, "`router` does not route over `searcher`: it routes over `solver`"),
    ("E044", 11, 3, "`parallel solver by router` needs a `route router` step before it in the same block"),
    ("E045", 17, 11, "`verifier` emits `verdict`: use it in a `verify` step, not `aggregate`"),
    (
        "E046",
        15,
        15,
        "`call` runs a tool on the agent's outputs, but `verifier` emits `verdict` (a decision, not a query)",
    ),
    ("E047", 13, 3, "`verify` takes one replica (`verify A` or `verify A[i]`)"),
    ("E050", 10, 1, "loop has no bound: an episode could run forever"),
    ("E051", 10, 1, "loop bound must be at least 1"),
    ("E052", 17, 1, "empty loop"),
    ("E053", 17, 1, "`break` outside a loop"),
    ("E054", 1, 10, "the workflow has no steps"),
    ("E055", 17, 1, "a round of this loop can take no step: it would repeat unchanged"),
    ("E060", 16, 9, "conditions test a verdict or an action, but `agg` emits `final_boxed`"),
    ("E061", 16, 21, "`verifier` never emits `approved` (its words: approve, reject)"),
    ("E062", 10, 4, "unreachable: `verifier` has not given a verdict before this condition"),
    (
        "E070",
        17,
        1,
        "`agg` acts after the last reward point: its trainable actions never reach the reward of `solver`",
    ),
    ("E073", 18, 19, "`verifier` emits `verdict`, a decision: the reward would score it, not an answer"),
    ("E071", 19, 19, "the rewarded agent `spare` never acts"),
    ("E074", 9, 57, "`calls = 2`: `agg` emits `final_boxed`, not an action that calls a tool"),
    ("E075", 9, 57, "`stop = replica`: `agg` emits `final_boxed`, which takes no final action to stop at"),
    ("E080", 9, 26, "template not found"),
    ("E081", 9, 26, "template `broken.j2` line 1: unexpected '}'"),
    ("E082", 9, 26, "template `unknown_var.j2` line 2 uses `hstory`, which no step provides"),
    ("W001", 9, 7, "`spare` is declared but never used"),
    ("W002", 1, 10, "no policy is trainable: `train` has nothing to update"),
    ("W005", 11, 55, "`trained = false` changes nothing: `spare` uses the frozen policy `fixed`"),
    ("W006", 10, 52, "`retries = 2` never resamples: `spare` emits `text`, which is always valid"),
]


@pytest.fixture(scope="module")
def template_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("templates")
    for name, text in TEMPLATES.items():
        (folder / name).write_text(text)
    return folder


def test_base_is_clean(template_dir):
    result = analyze(BASE, "t.srpo", [template_dir])
    assert result.diagnostics == []
    assert result.graph is not None


def test_every_code_has_a_golden_case():
    assert sorted(code for code, *_ in GOLDEN) == sorted(MUTATIONS)


@pytest.mark.parametrize("code,line,col,message", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden(template_dir, code, line, col, message):
    result = analyze(mutate(code), "t.srpo", [template_dir])
    found = [(d.code, d.span.line, d.span.col, d.message) for d in result.diagnostics]
    assert (code, line, col, message) in found
    assert result.ok == code.startswith("W")
    assert all(d.span.file == "t.srpo" for d in result.diagnostics)


def test_pretty_rendering_points_at_the_error(template_dir):
    text = mutate("E012")
    diag = next(d for d in analyze(text, "t.srpo", [template_dir]).diagnostics if d.code == "E012")
    lines = render_pretty(diag, text).splitlines()
    assert lines[0] == "t.srpo:17:11: error[E012]: undefined agent `agr`"
    assert lines[1].endswith("aggregate agr")
    caret = lines[2]
    assert caret.strip() == "^^^"
    assert caret.index("^") == lines[1].index("agr")
    assert lines[3].strip() == "= hint: did you mean `agg`?"


def test_github_rendering(template_dir):
    diag = next(d for d in analyze(mutate("E061"), "t.srpo", [template_dir]).diagnostics if d.code == "E061")
    assert render_github(diag).startswith("::error file=t.srpo,line=16,col=21,")
    assert "title=E061::" in render_github(diag)


def test_several_syntax_errors_in_one_run():
    text = BASE.replace('policy lm = hf("m")', 'policy lm hf("m")').replace("verify verifier\n", "verify 3\n")
    codes = [(d.code, d.span.line) for d in analyze(text, "t.srpo").diagnostics]
    assert codes == [("E006", 2), ("E001", 13)]


def test_several_semantic_errors_in_one_run(template_dir):
    text = BASE.replace("aggregate agg", "aggregate agr").replace("call web on", "call wbe on")
    codes = {d.code for d in analyze(text, "t.srpo", [template_dir]).diagnostics}
    assert {"E012", "E013"} <= codes


@pytest.mark.parametrize(
    "old,new,col,expected,following",
    [
        ('tool web = bm25(corpus = "c.jsonl")', 'tool web = "calc.py:calc"', 26, "`(`", "agent` on line 5"),
        ("  call web on searcher\n", "  call web\n", 11, "`on`", "}` on line 16"),
        (
            'agent agg uses lm prompt "p.j2" emits final_boxed',
            "agent agg uses",
            15,
            "a name",
            "repeat` on line 10",
        ),
    ],
)
def test_a_statement_missing_a_word_is_an_error_where_the_word_belongs(old, new, col, expected, following):
    """Not at the next line's first token: at the end of the statement's last token, on its own line."""
    text = BASE.replace(old, new)
    line = text[: text.index(new)].count("\n") + 1
    (diag,) = analyze(text, "t.srpo").diagnostics
    assert (diag.code, diag.span.line, diag.span.col) == ("E001", line, col)
    assert (
        diag.message
        == f"incomplete statement (expected {expected}): the next token, `{following}, cannot continue it"
    )
    caret = render_pretty(diag, text).splitlines()[2]
    assert caret.index("^") == len(f"{line:>4} | {new.rstrip()}")  # just past its last character


def test_a_word_out_of_place_on_the_statements_line_is_still_the_error():
    """`verify verifier 3`: the statement could end before `3`, so `3` is what is wrong."""
    (diag,) = analyze(BASE.replace("verify verifier\n", "verify verifier\n3\n"), "t.srpo").diagnostics
    assert (diag.code, diag.span.line, diag.span.col) == ("E001", 14, 1)
    assert diag.message.startswith("unexpected `3` (expected")


@pytest.mark.parametrize(
    "old,new,word,col",
    [
        ("agent agg uses", "agent agent uses", "agent", 7),  # a declaration keyword
        ("agent agg uses", "agent repeat uses", "repeat", 7),  # a step keyword of the grammar
        ("agent agg uses", "agent verify uses", "verify", 7),  # a step kind's keyword (the step table)
        ("tool web =", "tool call =", "call", 6),
        ("agent agg uses", "agent task uses", "task", 7),
    ],
)
def test_a_keyword_used_as_a_name_is_named_as_a_keyword(old, new, word, col):
    (diag,) = analyze(BASE.replace(old, new), "t.srpo").diagnostics
    assert (diag.code, diag.span.col, diag.span.end_col - diag.span.col) == ("E001", col, len(word))
    assert diag.message == f"`{word}` is a keyword and cannot be a name"
    assert diag.hint == f"pick another name, e.g. `{word}_1`"


@pytest.mark.parametrize(
    "loop,idle",
    [
        ("repeat at most 2 { break if verifier == approve }", True),
        ("repeat at most 3 { if verifier == reject { revise solver[2] } }", True),
        ("repeat at most 2 { repeat at most 2 { break if verifier == approve verify verifier } }", True),
        (
            "repeat at most 2 { if verifier == reject { verify verifier } else { break if verifier == approve } }",
            True,
        ),
        ("repeat at most 2 { break if verifier == approve verify verifier }", False),
        ("repeat at most 2 { if verifier == reject { verify verifier } else { revise solver } }", False),
        ("repeat at most 2 { repeat at most 2 { verify verifier break if verifier == approve } }", False),
    ],
)
def test_a_loop_round_that_can_take_no_step_is_e055(template_dir, loop, idle):
    """Such a round would come back to where it started with nothing changed (and leave the graph a
    cycle without events); a `break` inside an inner loop leaves only the inner loop."""
    text = BASE.replace("aggregate agg\n", f"verify verifier\n{loop}\naggregate agg\n")
    codes = [(d.code, d.span.line) for d in analyze(text, "t.srpo", [template_dir]).diagnostics]
    assert (("E055", 18) in codes) == idle, codes
    assert ("E055", 18) in codes or analyze(text, "t.srpo", [template_dir]).graph is not None


def test_every_code_the_checker_can_emit_is_documented():
    root = Path(__file__).resolve().parents[2]
    import re

    source = "".join(p.read_text() for p in (root / "srpo_dsl" / "lang").rglob("*.py"))
    codes = set(re.findall(r'"([EW]0\d\d)"', source))
    documented = set(re.findall(r"^\| ([EW]0\d\d) \|", (root / "docs" / "dsl.md").read_text(), re.M))
    assert {"E090", "E095", "W003"} <= codes
    assert codes <= documented, sorted(codes - documented)


@pytest.mark.parametrize(
    "agent,decides", [("router", True), ("verifier", True), ("solver", False), ("agg", False)]
)
def test_rewarding_an_agent_that_emits_a_decision_is_e073(template_dir, agent, decides):
    """A route or a verdict is a decision recorded by its step kind (the step table's `deciding`)."""
    text = BASE.replace("reward math_equiv(agg", f"reward math_equiv({agent}")
    found = [
        (d.code, d.span.line, d.span.col, d.hint) for d in analyze(text, "t.srpo", [template_dir]).diagnostics
    ]
    e073 = (
        "E073",
        18,
        19,
        "reward the agent that answers; to score a decision, give the agent a Python parser contract",
    )
    assert (e073 in found) == decides, found


@pytest.mark.parametrize(
    "old,new,code,col,message",
    [
        (
            "repeat at most 2 {",
            "repeat at most 10001 {",
            "E051",
            16,
            "a loop bound must be at most 10000, not 10001",
        ),
        (
            "repeat at most 2 {",
            "repeat at most 99999999999999999999 {",
            "E051",
            16,
            "a loop bound must be at most 10000, not 99999999999999999999",
        ),
        (
            "agent solver[3]",
            "agent solver[99999999999999999999]",
            "E040",
            14,
            "a pool's replica count must be at most 10000, not 99999999999999999999",
        ),
        (
            "agent solver[3]",
            "agent solver[10001]",
            "E040",
            14,
            "a pool's replica count must be at most 10000, not 10001",
        ),
    ],
)
def test_a_count_above_the_maximum_is_an_error_at_the_number(template_dir, old, new, code, col, message):
    (diag,) = analyze(BASE.replace(old, new), "t.srpo", [template_dir]).diagnostics
    assert (diag.code, diag.span.col, diag.message) == (code, col, message)
    assert diag.span.end_col - diag.span.col == len(message.rsplit(" ", 1)[-1])  # the caret spans the number


@pytest.mark.parametrize(
    "old,new", [("repeat at most 2 {", "repeat at most 10000 {"), ("agent solver[3]", "agent solver[10000]")]
)
def test_a_count_at_the_maximum_is_accepted(template_dir, old, new):
    assert analyze(BASE.replace(old, new), "t.srpo", [template_dir]).diagnostics == []


def test_many_diagnostics_print_in_time_linear_in_their_count(tmp_path, monkeypatch):
    """20,000 warnings once took 87 s to print: each split the whole source again. `validate` splits a
    file's source once however many diagnostics it has (counted); rendering 20,000 of them into a
    20,000-line source stays far under what a split each (about 100 s here) would take."""
    import time

    from typer.testing import CliRunner

    from srpo_dsl.cli.main import app
    from srpo_dsl.lang.syntax import messages
    from srpo_dsl.lang.syntax.messages import Diagnostic, Span, render_all

    unused = "".join(f'agent u{i} uses lm prompt "p.j2" emits boxed\n' for i in range(300))
    (tmp_path / "w.srpo").write_text(BASE + unused)
    splits = []
    monkeypatch.setattr(messages, "source_lines", lambda s: splits.append(1) or s.splitlines())
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "w.srpo")])
    assert result.output.count("warning[W001]") == 300 and len(splits) == 1
    monkeypatch.undo()
    source = "".join(f"agent a{i} uses lm prompt 'p.j2' emits boxed\n" for i in range(20_000))
    diags = [
        Diagnostic("W001", "unused", Span("w.srpo", i, 7, i, 9), None, "warning") for i in range(1, 20_001)
    ]
    start = time.perf_counter()
    shown = list(render_all(diags, source))
    assert time.perf_counter() - start < 10 and shown[-1].splitlines()[1].startswith(
        "20000 | agent a19999 uses lm"
    )
