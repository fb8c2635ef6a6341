"""The fast pipeline (one-regex lexer, nodes built as rules reduce) against Lark's own, and its spans."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lark.exceptions import UnexpectedCharacters, UnexpectedInput
from lark.lexer import LexerState
from lark.utils import TextSlice

from srpo_dsl.lang.syntax.grammar import lark_parser
from srpo_dsl.lang.syntax.lexer import ScanLexer
from srpo_dsl.lang.syntax.messages import Span, SrpoError
from srpo_dsl.lang.syntax.parser import _build_parser, fast_parse, parse
from tests.support.strategies import WORDS, mutated_workflow

FIELDS = ("type", "value", "start_pos", "end_pos", "line", "column", "end_line", "end_column")


def _tokens(lex, text):
    try:
        return [tuple(getattr(t, f) for f in FIELDS) for t in lex(text)]
    except UnexpectedCharacters as err:
        return ("error", err.line, err.column, err.pos_in_stream)


TEXT = st.one_of(
    st.text(max_size=120),
    st.lists(st.sampled_from([*WORDS, " ", "\t", "\r\n", "# note\n", "é", "@"]), max_size=50).map("".join),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_scan_lexer_equals_larks_lexer(text):
    scan = _build_parser().parser.lexer  # the parser's own lexer (`Lark.lex` would build Lark's)
    assert isinstance(scan, ScanLexer)
    assert _tokens(lambda t: scan.lex(LexerState(TextSlice.cast_from(t)), None), text) == _tokens(
        lark_parser().lex, text
    )


def _accepts(fn, text):
    try:
        fn(text)
        return True
    except (UnexpectedInput, SrpoError):
        return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_workflow())
def test_pipelines_agree_on_what_is_well_formed(text):
    assert _well_formed(text) == _accepts(lark_parser().parse, text)


def _well_formed(text):
    """The fast pipeline's verdict on the syntax: a literal out of range (`repeat at most -1`) is
    well-formed text that `parse` then reports as E001."""
    try:
        fast_parse(text, "f.srpo")
    except UnexpectedInput:
        return False
    except SrpoError:
        return True
    return True


def test_a_well_formed_literal_out_of_range_is_a_positioned_error():
    text = "workflow w\nrepeat at most -1 {\n}\n"
    assert _well_formed(text) and _accepts(lark_parser().parse, text)
    try:
        parse(text, "f.srpo")
    except SrpoError as err:
        (diag,) = err.diagnostics
        assert diag.code == "E001" and "expected a whole number, found `-1`" in diag.message
        assert (diag.span.line, diag.span.col) == (2, 16)
    else:
        raise AssertionError("a negative loop bound was accepted")


SRC = """workflow w
policy lm = hf("m\\"q", temperature = 0.5) frozen
agent solver[3] uses lm prompt "p.j2" emits boxed with (max_tokens = 64)
repeat at most 2 {
  parallel solver by router
  if v == reject { revise solver[2] } else { parallel solver[1, 3] }
} until v == approve
reward math_equiv(solver, task.answer) invalid -1
"""


def _at(span: Span) -> tuple[int, int, int, int]:
    return span.line, span.col, span.end_line, span.end_col


def test_spans_run_from_first_to_last_token_as_written():
    p = parse(SRC, "f.srpo")
    (pol,) = p.policies
    assert _at(pol.span) == (2, 1, 2, 49)  # through `frozen`
    assert pol.source.args[0].name is None and pol.source.args[0].value == 'm"q'
    assert _at(pol.source.args[0].span) == (2, 16, 2, 22)  # the positional string, quotes included
    assert _at(pol.source.args[1].span) == (2, 24, 2, 41)  # `temperature = 0.5`
    (agent,) = p.agents
    assert _at(agent.span) == (3, 1, 3, 73)  # through the `)` of `with (...)`
    assert _at(agent.prompt_span) == (3, 32, 3, 38)
    (loop,) = p.steps
    assert _at(loop.span) == (4, 1, 7, 21)  # `repeat` .. the end of the `until` condition
    par, branch = loop.body
    assert _at(par.span) == (5, 3, 5, 28) and par.by.name == "router"
    assert _at(branch.span) == (6, 3, 6, 69)  # through the else block's `}`
    assert branch.then[0].replicas == (2,) and _at(branch.then[0].span) == (6, 20, 6, 36)
    assert branch.orelse[0].replicas == (1, 3) and _at(branch.orelse[0].span) == (6, 46, 6, 67)
    (reward,) = p.rewards
    assert reward.field == ("task", "answer") and _at(reward.field_span) == (8, 27, 8, 38)
    assert reward.penalty == -1.0 and _at(reward.span) == (8, 1, 8, 50)


def test_a_number_python_cannot_convert_is_a_positioned_error():
    text = f'workflow w\nagent a[{"9" * 5000}] uses lm prompt "p.j2" emits boxed\naggregate a\n'
    try:
        parse(text, "f.srpo")
    except SrpoError as err:
        (d,) = err.diagnostics
        assert (d.code, d.span.line, d.span.col) == ("E001", 2, 9)
        assert d.message.startswith("invalid number `9999")
    else:
        raise AssertionError("a 5,000-digit pool size was accepted")
