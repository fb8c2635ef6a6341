"""Hypothesis strategies over the language: its words (`WORDS`) and a shipped workflow with a few of its
words deleted, inserted, replaced or duplicated (`mutated_workflow`)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
SOURCES = [p.read_text() for p in sorted(WORKFLOWS.glob("*.srpo"))]
WORDS = [
    "workflow",
    "policy",
    "agent",
    "task",
    "tool",
    "reward",
    "train",
    "route",
    "parallel",
    "verify",
    "revise",
    "aggregate",
    "call",
    "step",
    "env",
    "done",
    "repeat",
    "at",
    "most",
    "until",
    "if",
    "else",
    "break",
    "by",
    "on",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "=",
    "==",
    "!=",
    ",",
    ".",
    "solver",
    "router",
    "3",
    "0",
    "-1",
    "1e9",
    '"x.j2"',
    '"',
    "#",
    "\n",
    "with",
    "emits",
    "uses",
    "prompt",
    "frozen",
    "lora",
    "invalid",
    "task.answer",
]


@st.composite
def mutated_workflow(draw):
    src = draw(st.sampled_from(SOURCES))
    tokens = src.split(" ")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(tokens) - 1))
        op = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        if op == "delete":
            del tokens[i]
        elif op == "insert":
            tokens.insert(i, draw(st.sampled_from(WORDS)))
        elif op == "replace":
            tokens[i] = draw(st.sampled_from(WORDS))
        else:
            tokens.insert(i, tokens[i])
        if not tokens:
            tokens = [""]
    return " ".join(tokens)
