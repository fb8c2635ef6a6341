"""The parser: callbacks that check the shape of each rule, keywords read off the grammar, a leading
byte-order mark, and where recovery resumes."""

import pytest
from lark import Lark

from srpo_dsl.lang import analyze
from srpo_dsl.lang.syntax.grammar import grammar_text, lark_parser, statements
from srpo_dsl.lang.syntax.lexer import ScanLexer
from srpo_dsl.lang.syntax.messages import BOM, render_pretty
from srpo_dsl.lang.syntax.parser import _Build, parse
from tests.support.lang_cases import BASE


def _fast_parser(grammar: str) -> Lark:
    """The fast pipeline's settings, on another grammar."""
    return Lark(
        grammar,
        parser="lalr",
        lexer=ScanLexer,
        keep_all_tokens=True,
        maybe_placeholders=True,
        transformer=_Build(),
    )


@pytest.mark.parametrize(
    "rule,grown,text",
    [
        ('tool_decl: "tool" NAME "=" call', 'tool_decl: "tool" NAME [FROZEN] "=" call', "tool t = bm25()"),
        (
            "event_step: step_keyword NAME [selector] [only]",
            "event_step: step_keyword NAME [selector] [only] [FROZEN]",
            "route r",
        ),
        (
            'cond: NAME ["." NAME] COMPARE NAME',
            'cond: NAME ["." NAME] COMPARE NAME [FROZEN]',
            "break if v == x",
        ),
    ],
)
def test_a_rule_whose_shape_changes_fails_loudly_instead_of_building_a_wrong_node(rule, grown, text):
    """Callbacks unpack their parts by name: a part added to a rule cannot shift the others silently."""
    grammar = grammar_text()
    assert rule in grammar
    _fast_parser(grammar).parse(f"workflow w {text}")  # the callbacks fit the grammar as it is
    with pytest.raises(ValueError, match="too many values to unpack"):
        _fast_parser(grammar.replace(rule, grown)).parse(f"workflow w {text}")


def test_statement_keywords_are_read_off_the_grammar():
    words = statements(lark_parser())
    assert words.steps == {
        "ROUTE",
        "PARALLEL",
        "VERIFY",
        "REVISE",
        "AGGREGATE",
        "ACT",
        "CALL",
        "STEP",
        "REPEAT",
        "IF",
        "BREAK",
    }
    assert words.declarations == {"POLICY", "TASK", "TOOL", "ENV", "AGENT", "REWARD", "TRAIN"}
    assert words.boundaries == words.steps | words.declarations | {"WORKFLOW", "RBRACE"}
    grown = grammar_text().replace("| break_step", '| break_step\n     | stop_step\nstop_step: "stop"')
    assert statements(Lark(grown, parser="lalr")).steps == words.steps | {"STOP"}


def test_expected_steps_and_declarations_are_named_as_groups():
    (diag,) = analyze("workflow w\nrepeat at most 2 { 3 }\n", "t.srpo").diagnostics
    assert diag.message == "unexpected `3` (expected `}` or a step)"
    (diag,) = analyze("workflow w\n3\n", "t.srpo").diagnostics
    assert diag.message == "unexpected `3` (expected a declaration, a step or the end of the file)"


def test_a_contract_expected_is_a_name_though_step_keywords_are_accepted_there():
    """`emits route(solver)`: a contract's name may spell a step keyword; the message says "a name"."""
    (diag,) = analyze('workflow w\nagent a uses lm prompt "p" emits 3\n', "t.srpo").diagnostics
    assert diag.message == "unexpected `3` (expected a name or a string in double quotes)"
    (diag,) = analyze("workflow w\nreward f(a, 3)\n", "t.srpo").diagnostics
    assert diag.message == "unexpected `3` (expected `task` or a name)"  # other keywords are still named


def test_recovery_resumes_at_a_keyword_not_at_a_name_that_starts_like_one():
    text = BASE.replace('policy lm = hf("m")', 'policy lm hf("m")\n  agents_note = 1')
    text = text.replace("verify verifier\n", "verify 3\n")
    codes = [(d.code, d.span.line) for d in analyze(text, "t.srpo").diagnostics]
    assert codes == [("E006", 2), ("E001", 14)]


def test_a_leading_byte_order_mark_is_dropped():
    assert parse(BOM + BASE, "t.srpo") == parse(BASE, "t.srpo")  # spans and source included


def test_columns_of_the_first_line_ignore_the_byte_order_mark():
    text = BOM + "workflow 3\n"
    diag = analyze(text, "t.srpo").diagnostics[0]
    assert (diag.code, diag.span.line, diag.span.col) == ("E001", 1, 10)
    lines = render_pretty(diag, text).splitlines()
    assert lines[1] == "   1 | workflow 3"
    assert lines[2].index("^") == lines[1].index("3")


def test_a_byte_order_mark_elsewhere_is_still_an_error():
    (diag,) = analyze("workflow w\n" + BOM + "aggregate a\n", "t.srpo").diagnostics
    assert (diag.code, diag.span.line, diag.span.col) == ("E002", 2, 1)


LOOP = BASE[BASE.index("repeat") : BASE.index("aggregate agg\n")]


@pytest.mark.parametrize(
    "loop,line,col,found",
    [
        # the `}` of a one-line `else` block is missing: the loop's `}` closes it, and `until` is left over
        (
            LOOP.replace(
                "  verify verifier\n", "  if verifier == reject { revise solver[1] } else { verify verifier\n"
            ),
            16,
            3,
            "unexpected `until`",
        ),
        # the loop's `}` is missing before `until`
        (LOOP.replace("} until", "until"), 16, 1, "unexpected `until`"),
        # a block's first step on the line of `repeat`, its `}` missing, more steps after it
        (
            "repeat at most 2 { route router parallel solver by router\nverify verifier\n",
            13,
            1,
            "unexpected `reward`",
        ),
    ],
)
def test_a_missing_closing_brace_is_one_error_that_says_a_block_is_open(loop, line, col, found):
    text = BASE.replace(LOOP, loop)
    (diag,) = analyze(text, "t.srpo").diagnostics
    assert (diag.code, diag.span.line, diag.span.col) == ("E001", line, col)
    assert diag.message == f"{found} (expected `}}` or a step)"
    assert (
        diag.hint
        == f"a block is still open here: is a `}}` missing before `{found.split('`')[1]}` or earlier?"
    )


def test_recovery_does_not_blank_a_closing_brace_on_the_erroneous_line():
    text = BASE.replace("  verify verifier\n", "  verify 3 }\n").replace("} until verifier == approve\n", "")
    (diag,) = analyze(text, "t.srpo").diagnostics
    assert (diag.code, diag.span.line, diag.message) == ("E001", 13, "unexpected `3` (expected a name)")


def _nested(depth: int) -> str:
    """BASE with its `verify verifier` inside `depth` loops, one inside the other, each on its line."""
    loops = "repeat at most 2 {\n" * depth + "verify verifier\n" + "}\n" * depth
    return BASE.replace("aggregate agg\n", loops + "aggregate agg\n")


def test_blocks_nest_at_most_max_nesting_deep_and_deeper_is_one_e008():
    """Every pass over the steps recurses; a depth beyond the limit is refused at parse time (no
    RecursionError anywhere after): the first block too deep, at its keyword."""
    from srpo_dsl.lang.syntax.nesting import MAX_NESTING

    assert "E008" not in {d.code for d in analyze(_nested(MAX_NESTING), "t.srpo").diagnostics}
    first = BASE.splitlines().index("aggregate agg") + 1 + MAX_NESTING  # the line of the first too deep
    for depth in (MAX_NESTING + 1, 300, 5000):
        (diag,) = analyze(_nested(depth), "t.srpo").diagnostics
        assert (diag.code, diag.span.line, diag.span.col, diag.span.end_col) == ("E008", first, 1, 7)
        assert diag.message == f"blocks nested more than {MAX_NESTING} deep"


def test_too_deep_with_a_syntax_error_is_the_same_e008_not_a_recursion_error():
    """Text that does not parse goes through Lark's own pipeline, which recurses as deep as the blocks
    nest: 400 loops with one `}` missing, or with a bad step inside, are the E008 alone."""
    from srpo_dsl.lang.syntax.nesting import MAX_NESTING

    first = BASE.splitlines().index("aggregate agg") + 1 + MAX_NESTING
    unclosed = _nested(400).replace("}\naggregate agg", "aggregate agg", 1)
    for text in (unclosed, _nested(400).replace("verify verifier\n}", "verify 3\n}", 1)):
        (diag,) = analyze(text, "t.srpo").diagnostics
        assert (diag.code, diag.span.line, diag.span.col, diag.span.end_col) == ("E008", first, 1, 7)
    shallow = _nested(3).replace("verify verifier\n}", "verify 3\n}", 1)  # not too deep: its syntax error
    assert [d.code for d in analyze(shallow, "t.srpo").diagnostics] == ["E001"]


def test_a_letter_outside_ascii_in_a_name_says_names_are_ascii():
    text = BASE.replace("agent agg uses", "agent rédacteur uses")
    (diag,) = analyze(text, "t.srpo").diagnostics
    line = BASE.splitlines().index('agent agg uses lm prompt "p.j2" emits final_boxed') + 1
    assert (diag.code, diag.span.line, diag.span.col) == ("E002", line, 8)
    assert diag.message == "unexpected character `é` in `rédacteur`: a name is ASCII letters, digits and `_`"
    assert diag.hint.startswith("spell the name in ASCII, e.g. `redacteur`")
    (cjk,) = analyze(BASE.replace("agent agg uses", "agent 审稿人 uses"), "t.srpo").diagnostics
    assert "in `审稿人`: a name is ASCII" in cjk.message and "e.g." not in cjk.hint
