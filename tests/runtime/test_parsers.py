"""Output-contract parsers: strict on tricky strings, never raising on any text."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srpo_dsl.registries import CONTRACTS
from srpo_dsl.runtime import parsers
from srpo_dsl.runtime.parsers import Parsed, last_boxed, parse_output

APPROVE = ("approve", "reject")


def route(text: str, pool: int = 3) -> Parsed:
    return parse_output("route", text, pool_size=pool)


def test_every_contract_of_the_language_has_its_parser():
    assert all(CONTRACTS[name].parser is getattr(parsers, f"parse_{name}") for name in CONTRACTS)


@pytest.mark.parametrize(
    "text, value",
    [
        ("<route>1,3</route>", (1, 3)),
        ("<route>3, 1</route>", (1, 3)),
        ("<route> 2 </route>", (2,)),
        ("<route>\n1,\n2,\n3\n</route>", (1, 2, 3)),
        ("<route>STOP</route>", "STOP"),
        ("<route> STOP </route>", "STOP"),
        ("I pick two.\n<route>2</route>\nDone.", (2,)),
        ("<think><route>1</route></think><route>STOP</route>", "STOP"),
        ("the prompt opened thinking <route>1</route></think><route>3</route>", (3,)),
    ],
)
def test_route_valid(text, value):
    assert route(text) == Parsed(True, value, None)


@pytest.mark.parametrize(
    "text",
    [
        "<route>STOP,1</route>",
        "<route>1,STOP</route>",
        "<route>stop</route>",
        "<route>Stop</route>",
        "<route>0</route>",
        "<route>4</route>",
        "<route>1,4</route>",
        "<route>-1</route>",
        "<route>+1</route>",
        "<route>1,1</route>",
        "<route>2, 2, 3</route>",
        "<route></route>",
        "<route>  </route>",
        "<route>,</route>",
        "<route>1,,2</route>",
        "<route>1,2,</route>",
        "<route>1 2</route>",
        "<route>1.0</route>",
        "<route>one</route>",
        "<route>1</route><route>2</route>",
        "<route>1",
        "1</route>",
        "</route>1<route>",
        "<route><route>1</route>",
        "<think><route>1</route></think>",
        "<think>never closed <route>1</route>",
        "no tag at all",
        "",
        "<ROUTE>1</ROUTE>",
        "<route>１</route>",
    ],
)
def test_route_invalid_never_defaults(text):
    parsed = route(text)
    assert parsed.valid is False and parsed.value is None and parsed.error


def test_route_needs_a_pool():
    with pytest.raises(ValueError):
        parse_output("route", "<route>1</route>")


@pytest.mark.parametrize(
    "text, words, value",
    [
        ("<verify>approve</verify>", APPROVE, "approve"),
        ("Looks right. <verify> reject\n</verify>", APPROVE, "reject"),
        ("<think><verify>reject</verify></think> <verify>approve</verify>", APPROVE, "approve"),
        ("<verify>yes</verify>", ("yes", "no"), "yes"),
    ],
)
def test_verdict_valid(text, words, value):
    assert parse_output("verdict", text, args=words) == Parsed(True, value, None)


@pytest.mark.parametrize(
    "text",
    [
        "<verify>Approve</verify>",
        "<verify>APPROVE</verify>",
        "<verify>approved</verify>",
        "<verify></verify>",
        "<verify>approve</verify><verify>approve</verify>",
        "<verify>approve reject</verify>",
        "<think><verify>approve</verify></think>",
        "approve",
        "<verify>yes</verify>",
    ],
)
def test_verdict_invalid(text):
    assert parse_output("verdict", text, args=APPROVE).valid is False


@pytest.mark.parametrize(
    "text, value",
    [
        (r"so $\boxed{42}$.", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"$\boxed{\left( 3, \frac{\pi}{2} \right)}.$", r"\left( 3, \frac{\pi}{2} \right)"),
        (r"first \boxed{1}, then \boxed{ 2 }", "2"),
        (r"\fbox{7}", "7"),
        (r"\boxed {x^{2^{3}}}", "x^{2^{3}}"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed{\text{(B)}}", r"\text{(B)}"),
        (r"<think>\boxed{9}</think> \boxed{3}", "3"),
    ],
)
def test_boxed_valid(text, value):
    assert parse_output("boxed", text) == Parsed(True, value, None)


@pytest.mark.parametrize(
    "text",
    [
        r"\boxed{\frac{1}{2}",
        r"\boxed{1} and \boxed{2",
        r"\boxed{}",
        r"\boxed{  }",
        "42",
        r"\boxed 5",
        r"<think>\boxed{9}</think> no answer",
        r"\boxed{\}",
    ],
)
def test_boxed_invalid(text):
    assert parse_output("boxed", text).valid is False


def test_last_boxed_is_raw():
    assert last_boxed(r"\boxed{ a } and \boxed{ b }") == " b "
    assert last_boxed("nothing") is None


@pytest.mark.parametrize(
    "text, value",
    [
        (r"The solvers agree. FINAL: \boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),
        ("FINAL:\n  \\boxed{12} and that is all", "12"),
        (r"Solver 1 says \boxed{3}. FINAL: \boxed{4}", "4"),
        (r"<think>FINAL: \boxed{1}</think>FINAL: \boxed{2}", "2"),
    ],
)
def test_final_boxed_valid(text, value):
    assert parse_output("final_boxed", text) == Parsed(True, value, None)


@pytest.mark.parametrize(
    "text",
    [
        r"\boxed{4}",
        r"FINAL: 4",
        r"FINAL: the answer is \boxed{4}",
        r"FINAL: \boxed{4} FINAL: \boxed{4}",
        r"FINAL: \boxed{\frac{1}{2}",
        r"FINAL: \boxed{}",
        r"final: \boxed{4}",
        r"<think>FINAL: \boxed{4}</think>",
    ],
)
def test_final_boxed_invalid(text):
    assert parse_output("final_boxed", text).valid is False


@pytest.mark.parametrize(
    "contract, text, value",
    [
        (
            "search",
            "<think>I need the author.</think><search> pride and prejudice author </search>",
            "pride and prejudice author",
        ),
        (
            "search",
            "<think>try <search>draft</search> first?</think>\n<search>final query</search>",
            "final query",
        ),
        ("answer", "<think>It is Austen.</think> <answer> Jane Austen </answer>", "Jane Austen"),
        ("answer", "prompt-opened thought</think><answer>Mars</answer>", "Mars"),
    ],
)
def test_think_then_tag_valid(contract, text, value):
    assert parse_output(contract, text) == Parsed(True, value, None)


@pytest.mark.parametrize(
    "contract, text",
    [
        ("search", "<search>no thinking</search>"),
        ("search", "<search>before</search><think>x</think>"),
        ("search", "<think>x</think><search>a</search><search>b</search>"),
        ("search", "<think>x</think><search>  </search>"),
        ("search", "<think>x</think>"),
        ("search", "<think><search>only inside</search></think>"),
        ("search", "<think>unclosed <search>q</search>"),
        ("answer", "<think>x</think><answer>a</answer><answer>a</answer>"),
        ("answer", "<think>x</think><answer>a"),
        ("answer", "<think>x</think><search>q</search>"),
    ],
)
def test_think_then_tag_invalid(contract, text):
    assert parse_output(contract, text).valid is False


def test_text_is_always_valid():
    assert parse_output("text", "  anything <route>9</route> \n") == Parsed(
        True, "anything <route>9</route>", None
    )
    assert parse_output("text", "") == Parsed(True, "", None)


def test_unknown_contract_and_missing_words():
    with pytest.raises(ValueError, match="unknown output contract"):
        parse_output("json", "{}")
    with pytest.raises(ValueError):
        parse_output("verdict", "<verify>approve</verify>")


TRICKY = st.lists(
    st.sampled_from(
        [
            "<think>",
            "</think>",
            "<route>",
            "</route>",
            "<verify>",
            "</verify>",
            "<search>",
            "</search>",
            "<answer>",
            "</answer>",
            "\\boxed{",
            "\\fbox{",
            "{",
            "}",
            "\\",
            "FINAL:",
            "STOP",
            "1",
            "3",
            ",",
            " ",
            "\n",
            "approve",
            "x",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), TRICKY), st.integers(1, 5))
def test_parsers_never_raise(text, pool):
    for contract in CONTRACTS:
        parsed = parse_output(
            contract, text, pool_size=pool, args=("answer",) if contract == "tag" else APPROVE
        )
        assert isinstance(parsed, Parsed)
        assert (parsed.error is None) == parsed.valid
        assert parsed.valid or parsed.value is None
        assert parsed.valid or not CONTRACTS[contract].always_valid  # `text`: no output is invalid
        if contract == "route" and parsed.valid and parsed.value != "STOP":
            assert list(parsed.value) == sorted(set(parsed.value)) and all(
                1 <= i <= pool for i in parsed.value
            )


def test_route_with_thousands_of_digits_is_out_of_range_not_a_crash():
    """int() refuses strings over 4,300 digits; the range is checked on the digits first."""
    for text in ["<route>" + "9" * 5000 + "</route>", "<route>1,2" + "0" * 4999 + "</route>"]:
        parsed = route(text)
        assert parsed.valid is False and "outside 1..3" in parsed.error and len(parsed.error) < 120
    assert route("<route>" + "0" * 5000 + "2</route>") == Parsed(True, (2,), None)  # leading zeros are digits


@pytest.mark.parametrize(
    "text,value",
    [
        ("<answer>42</answer>", "42"),
        ("<think><answer>1</answer></think> <answer> (1 + 2) * 3 </answer>", "(1 + 2) * 3"),
        ("reasoning</think><answer>x</answer>", "x"),  # thinking opened by the chat template
    ],
)
def test_tag_contract_accepts(text, value):
    assert parse_output("tag", text, args=("answer",)) == Parsed(True, value, None)


@pytest.mark.parametrize(
    "text,error",
    [
        ("42", "found 0 opening and 0 closing"),
        ("<answer>1</answer><answer>2</answer>", "found 2 opening and 2 closing"),
        ("<answer>  </answer>", "empty <answer></answer>"),
        ("</answer>1<answer>", "comes before"),
        ("<code>print(1)</code>", "found 0 opening"),  # another tag does not count
    ],
)
def test_tag_contract_rejects(text, error):
    parsed = parse_output("tag", text, args=("answer",))
    assert not parsed.valid and error in parsed.error


def test_tag_contract_needs_its_name():
    with pytest.raises(ValueError, match="exactly one tag name"):
        parse_output("tag", "<a>1</a>")
