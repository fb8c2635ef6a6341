"""The syntax tree's one walk and its visitor: every kind of step, nested blocks included."""

from typing import get_args

import pytest

from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.parser import parse

# Every kind of step, with loops and branches nested two deep.
PROGRAM = """workflow w
route r
parallel s by r
repeat at most 3 {
  verify v
  if v == reject {
    revise s[2]
    repeat at most 2 { parallel s[1, 3] break if v == approve }
  } else {
    call web on q
    step box on q
  }
} until v == approve
aggregate a
"""

DEPTH_FIRST = [
    "route",
    "parallel",
    "Repeat",
    "verify",
    "If",
    "revise",
    "Repeat",
    "parallel",
    "Break",
    "CallTool",
    "EnvStep",
    "aggregate",
]


def _name(step) -> str:
    """An event step's keyword, else the name of the step's node type."""
    return step.kind if isinstance(step, n.EventStep) else type(step).__name__


def _steps():
    return parse(PROGRAM, "w.srpo").steps


def test_walk_steps_visits_every_step_depth_first_in_program_order():
    assert [_name(s) for s in n.walk_steps(_steps())] == DEPTH_FIRST


def test_walk_events_keeps_the_event_steps_with_their_keyword():
    kinds = [(s.kind, s.agent.name) for s in n.walk_events(_steps())]
    assert kinds == [
        ("route", "r"),
        ("parallel", "s"),
        ("verify", "v"),
        ("revise", "s"),
        ("parallel", "s"),
        ("aggregate", "a"),
    ]


class _Names(n.StepVisitor[[int], str]):
    """Which method each step reaches, and the extra argument passed through."""

    def visit_event(self, step, tag):
        return f"event:{step.kind}:{tag}"

    def visit_call(self, step, tag):
        return f"call:{tag}"

    def visit_env(self, step, tag):
        return f"env:{tag}"

    def visit_repeat(self, step, tag):
        return f"repeat:{tag}"

    def visit_if(self, step, tag):
        return f"if:{tag}"

    def visit_break(self, step, tag):
        return f"break:{tag}"


def test_visitor_dispatches_each_kind_of_step_to_its_method():
    steps = list(n.walk_steps(_steps()))
    assert {type(s) for s in steps} == set(get_args(n.Step))  # the program holds every kind of step
    assert [_Names().visit(s, 7) for s in steps] == [
        "event:route:7",
        "event:parallel:7",
        "repeat:7",
        "event:verify:7",
        "if:7",
        "event:revise:7",
        "repeat:7",
        "event:parallel:7",
        "break:7",
        "call:7",
        "env:7",
        "event:aggregate:7",
    ]


def test_a_visitor_must_say_what_every_kind_of_step_means():
    class Partial(n.StepVisitor[[], None]):
        def visit_event(self, step):
            return None

    with pytest.raises(TypeError, match="abstract"):
        Partial()
