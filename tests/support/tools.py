"""Tool calls through real chat templates: the tokenizers of tests/data/chat_tokenizers (`CHAT`), a user's
tool file (`TOOL`), a workflow calling it (`tool_workflow`) and a model's reply calling a tool (`call`)."""

from __future__ import annotations

import json
from pathlib import Path

CHAT = Path(__file__).resolve().parents[1] / "data" / "chat_tokenizers"

TOOL = '''
from typing import Literal


def lookup(query: list[str], timeout: float = 5) -> list[str]:
    """Look a word up in the dictionary,
    and say what it means.

    Args:
        query: The word to look up,
            in lower case.
        timeout: Seconds to wait.

    Returns:
        The meanings.
    """
    return ["a meaning" for _ in query]


def pick(choice: "list[Literal['a', 'b']]") -> list[str]:
    return choice
'''


def tool_workflow(folder: Path, tokenizer: str, tool_format: str | None) -> Path:
    (folder / "tools.py").write_text(TOOL)
    (folder / "q.j2").write_text("Define {{ task.question }}.")
    fmt = f', tool_format = "{tool_format}"' if tool_format else ""
    path = folder / "w.srpo"
    path.write_text(
        "workflow w\n"
        f'policy lm = hf("{CHAT / tokenizer}"{fmt})\n'
        "task arith(n = 8, seed = 0)\n"
        'tool lookup = "tools.py:lookup"(timeout = 5)\n'
        'agent solver uses lm prompt "q.j2" emits act(lookup, answer) with (max_tokens = 96)\n'
        "act solver\n"
        "call lookup on solver\n"
        "reward exact_match(solver, task.answer)\n"
    )
    return path


def call(fmt: str, name: str = "lookup", **args: object) -> str:
    body = json.dumps({"name": name, ("arguments" if fmt == "hermes" else "parameters"): args})
    return f"<tool_call>{body}</tool_call>" if fmt == "hermes" else body
