"""Native tool calls: an acting agent on a policy with `tool_format` calls its tools as its model was trained
to (docs/dsl.md, "Tools in the chat template"), and takes its final action with its tag as before.

- `hermes` (Qwen2.5, Qwen3, Hermes): `<tool_call>{"name": "search", "arguments": {"query": "..."}}
  </tool_call>` outside thinking; `calls = N` allows up to N such blocks of one tool in one turn.
- `llama3` (Llama 3.1, 3.2, 3.3): the reply is one JSON object, `{"name": "search", "parameters":
  {"query": "..."}}` (the `<|python_tag|>` before it is a special token, gone from the decoded text).

A call's value is its one argument (the query; a non-string argument as JSON). A reply with no call is
parsed for the final action (`<answer>...</answer>`). Anything else (JSON that does not parse, a name
that is not one of the agent's tools, not exactly one argument, a call beside the final action's tag) is
an invalid action, with one line saying why.
"""

from __future__ import annotations

import json
import re

from srpo_dsl.runtime.parsers import Parsed, outside_thinking, parse_act

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_native(text: str, actions: tuple[str, ...], tool_format: str, calls: int = 1) -> Parsed:
    """The action of `text` under `tool_format`: `{"action": TOOL, "value": query}` (a list of queries for
    `calls > 1`), or the final action's tag as `parse_act` reads it."""
    visible = outside_thinking(text)
    bodies = _hermes_bodies(visible) if tool_format == "hermes" else _llama3_bodies(visible)
    if isinstance(bodies, Parsed):
        return bodies
    if not bodies:
        return parse_act(text, actions[-1:])
    if f"<{actions[-1]}>" in visible:
        return Parsed(False, None, f"a tool call and <{actions[-1]}> in one reply")
    if len(bodies) > calls:
        return Parsed(False, None, f"at most {calls} tool call(s) in one turn, found {len(bodies)}")
    found = [_call(b, actions[:-1], tool_format) for b in bodies]
    bad = next((c for c in found if isinstance(c, Parsed)), None)
    if bad is not None:
        return bad
    pairs = [c for c in found if not isinstance(c, Parsed)]  # every call, (tool, query)
    names = {name for name, _ in pairs}
    if len(names) != 1:
        return Parsed(False, None, f"one tool per turn, found calls of {', '.join(sorted(names))}")
    values = [value for _, value in pairs]
    return Parsed(True, {"action": names.pop(), "value": values if calls > 1 else values[0]})


def _hermes_bodies(visible: str) -> list[str] | Parsed:
    bodies = _HERMES.findall(visible)
    if visible.count("<tool_call>") != len(bodies) or visible.count("</tool_call>") != len(bodies):
        return Parsed(False, None, "unbalanced <tool_call> tags")
    return bodies


def _llama3_bodies(visible: str) -> list[str]:
    stripped = visible.strip()
    return [stripped] if stripped.startswith("{") else []


def _call(body: str, tools: tuple[str, ...], tool_format: str) -> tuple[str, str] | Parsed:
    """(tool, query) of one call's JSON; an invalid `Parsed` saying what is wrong with it."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return Parsed(False, None, f"malformed tool call: {exc.msg} at character {exc.pos}")
    key = "arguments" if tool_format == "hermes" else "parameters"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return Parsed(False, None, 'a tool call is a JSON object with a "name"')
    if call["name"] not in tools:
        return Parsed(False, None, f"no tool named {call['name']!r} (tools: {', '.join(tools) or 'none'})")
    args = call.get(key, call.get("arguments" if key == "parameters" else "parameters"))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return Parsed(False, None, f'the "{key}" of a tool call are not JSON')
    if not isinstance(args, dict) or len(args) != 1:
        return Parsed(False, None, f'a tool call has exactly one argument in its "{key}"')
    (value,) = args.values()
    return call["name"], value if isinstance(value, str) else json.dumps(value)
