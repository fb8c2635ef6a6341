"""Strict, pure output-contract parsers: text -> `Parsed(valid, value, error)`.

Nothing is repaired: an output that breaks its contract is invalid, and the executor
records it with the workflow's penalty (a broken route is neither STOP nor "all").

Thinking never counts: tags and boxes inside `<think>...</think>` are ignored; an
unclosed `<think>` hides the rest of the text; a leading `</think>` with no opening tag
closes thinking that the chat template opened in the prompt. Words are case-sensitive
and compared after stripping whitespace (`<verify> approve </verify>` is `approve`,
`<verify>Approve</verify>` is not). Each parser is the `parse` of its contract's entry in
`srpo_dsl.registries.CONTRACTS`: `parse(text, *args) -> Parsed`, its arguments after the text
by the kind of the contract's declared arguments (`ARGUMENTS`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from srpo_dsl.registries import CONTRACTS


@dataclass(frozen=True)
class Parsed:
    valid: bool
    value: object | None = None
    error: str | None = None


def _bad(error: str) -> Parsed:
    return Parsed(False, None, error)


def _quote(content: str, limit: int = 60) -> str:
    """`repr(content)`, shortened: error messages stay short whatever the model wrote."""
    return repr(content if len(content) <= limit else content[:limit] + "...")


@dataclass(frozen=True)
class _Visible:
    """The text with thinking blanked out (same length, so offsets agree with the original)."""

    text: str
    thought_end: int  # where the first think block ends; -1 if there is none


def _visible(text: str) -> _Visible:
    parts: list[str] = []
    pos, first_end = 0, -1
    close = text.find("</think>")
    if close >= 0 and "<think>" not in text[:close]:  # thinking opened by the prompt
        pos = first_end = close + len("</think>")
        parts.append(" " * pos)
    while (start := text.find("<think>", pos)) >= 0:
        end = text.find("</think>", start)
        stop = len(text) if end < 0 else end + len("</think>")
        parts += [text[pos:start], " " * (stop - start)]
        if first_end < 0 and end >= 0:
            first_end = stop
        pos = stop
    parts.append(text[pos:])
    return _Visible("".join(parts), first_end)


def outside_thinking(text: str) -> str:
    """`text` with its thinking blanked out (same length)."""
    return _visible(text).text


def _one_tag(visible: str, tag: str) -> tuple[int, str] | Parsed:
    """The start and stripped content of the only `<tag>...</tag>` in `visible`."""
    opens, closes = visible.count(f"<{tag}>"), visible.count(f"</{tag}>")
    if opens != 1 or closes != 1:
        return _bad(
            f"expected exactly one <{tag}>...</{tag}> outside thinking, "
            f"found {opens} opening and {closes} closing tags"
        )
    start, end = visible.find(f"<{tag}>"), visible.find(f"</{tag}>")
    if end < start:
        return _bad(f"</{tag}> comes before <{tag}>")
    return start, visible[start + len(tag) + 2 : end].strip()


def _braced(text: str, start: int) -> str | None:
    """The content of the balanced `{...}` opening at `text[start]`; `\\{`, `\\}` are literal."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    return None


_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed(text: str) -> str | None:
    """The raw content of the last `\\boxed{...}` (or `\\fbox{...}`); None if absent or unbalanced."""
    starts = [m.end() - 1 for m in _BOX.finditer(text)]
    return _braced(text, starts[-1]) if starts else None


def parse_route(text: str, pool_size: int) -> Parsed:
    """`<route>STOP</route>` or `<route>1,3</route>`: unique replica numbers in 1..pool_size."""
    body = _one_tag(_visible(text).text, "route")
    if isinstance(body, Parsed):
        return body
    content = body[1]
    if content == "STOP":
        return Parsed(True, "STOP")
    parts = [p.strip() for p in content.split(",")]
    if not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        return _bad(f"route must be STOP or comma-separated replica numbers, got {_quote(content)}")
    # Range first, on the digits: int() refuses strings of more than 4,300 digits.
    if not all(len(p.lstrip("0")) <= len(str(pool_size)) for p in parts):
        return _bad(f"route {_quote(content)} is outside 1..{pool_size}")
    picks = [int(p.lstrip("0") or "0") for p in parts]
    if len(set(picks)) != len(picks):
        return _bad(f"route names a replica twice: {_quote(content)}")
    if not all(1 <= p <= pool_size for p in picks):
        return _bad(f"route {_quote(content)} is outside 1..{pool_size}")
    return Parsed(True, tuple(sorted(picks)))


def parse_verdict(text: str, words: tuple[str, ...]) -> Parsed:
    """Exactly one `<verify>WORD</verify>` with WORD (stripped, case-sensitive) in `words`."""
    body = _one_tag(_visible(text).text, "verify")
    if isinstance(body, Parsed):
        return body
    if body[1] not in words:
        return _bad(f"verdict {_quote(body[1])} is not one of {', '.join(words)}")
    return Parsed(True, body[1])


def parse_boxed(text: str) -> Parsed:
    """The stripped content of the last `\\boxed{...}` outside thinking."""
    visible = _visible(text).text
    if not _BOX.search(visible):
        return _bad("no \\boxed{...} answer outside thinking")
    value = last_boxed(visible)
    if value is None:
        return _bad("unbalanced braces in the last \\boxed{...}")
    if not value.strip():
        return _bad("empty \\boxed{}")
    return Parsed(True, value.strip())


_FINAL = re.compile(r"FINAL:\s*")


def parse_final_boxed(text: str) -> Parsed:
    """Exactly one `FINAL:` outside thinking, followed (after whitespace) by a balanced `\\boxed{...}`."""
    visible = _visible(text).text
    marks = list(_FINAL.finditer(visible))
    if len(marks) != 1:
        return _bad(f"expected exactly one `FINAL:` outside thinking, found {len(marks)}")
    box = _BOX.match(visible, marks[0].end())
    if not box:
        return _bad("`FINAL:` is not followed by \\boxed{...}")
    value = _braced(visible, box.end() - 1)
    if value is None:
        return _bad("unbalanced braces in \\boxed{...} after `FINAL:`")
    if not value.strip():
        return _bad("empty \\boxed{} after `FINAL:`")
    return Parsed(True, value.strip())


def _think_then(text: str, tag: str) -> Parsed:
    """A closed think block, then exactly one non-empty `<tag>...</tag>` after it."""
    visible = _visible(text)
    if visible.thought_end < 0:
        return _bad("expected a <think>...</think> block")
    body = _one_tag(visible.text, tag)
    if isinstance(body, Parsed):
        return body
    start, content = body
    if start < visible.thought_end:
        return _bad(f"<{tag}> must come after the <think>...</think> block")
    if not content:
        return _bad(f"empty <{tag}></{tag}>")
    return Parsed(True, content)


def parse_search(text: str) -> Parsed:
    return _think_then(text, "search")


def parse_answer(text: str) -> Parsed:
    return _think_then(text, "answer")


def parse_tag(text: str, name: str) -> Parsed:
    """Exactly one non-empty `<name>...</name>` outside thinking."""
    body = _one_tag(_visible(text).text, name)
    if isinstance(body, Parsed):
        return body
    if not body[1]:
        return _bad(f"empty <{name}></{name}>")
    return Parsed(True, body[1])


def parse_act(text: str, actions: tuple[str, ...]) -> Parsed:
    """Exactly one action outside thinking: a non-empty `<ACTION>...</ACTION>`, ACTION in `actions`
    (`<search>q</search>` or `<answer>a</answer>`). The value is `{"action": ACTION, "value": content}`."""
    visible = _visible(text).text
    taken = [a for a in actions if f"<{a}>" in visible or f"</{a}>" in visible]
    if len(taken) != 1:
        tags = " or ".join(f"<{a}>...</{a}>" for a in actions)
        found = f"found {', '.join(f'<{a}>' for a in taken)}" if taken else "found none"
        return _bad(f"expected exactly one action, {tags}, outside thinking; {found}")
    body = _one_tag(visible, taken[0])
    if isinstance(body, Parsed):
        return body
    if not body[1]:
        return _bad(f"empty <{taken[0]}></{taken[0]}>")
    return Parsed(True, {"action": taken[0], "value": body[1]})


def parse_act_calls(text: str, actions: tuple[str, ...], calls: int) -> Parsed:
    """`parse_act` for an agent that may call a tool several times in one turn (`calls = N`): one action,
    whose tag a tool action (any but the last, final one) may repeat up to `calls` times. A tool action's
    value is the list of its calls' contents in order (`{"action": "calc", "value": ["1+2", "3*4"]}`);
    the final action's is its one content, as with `parse_act`."""
    visible = _visible(text).text
    taken = [a for a in actions if f"<{a}>" in visible or f"</{a}>" in visible]
    if len(taken) != 1 or taken[0] == actions[-1]:
        return parse_act(text, actions)
    tag = taken[0]
    bodies = _tags(visible, tag)
    if isinstance(bodies, Parsed):
        return bodies
    if len(bodies) > calls:
        return _bad(f"at most {calls} <{tag}> calls in one turn, found {len(bodies)}")
    if not all(bodies):
        return _bad(f"empty <{tag}></{tag}>")
    return Parsed(True, {"action": tag, "value": bodies})


def _tags(visible: str, tag: str) -> list[str] | Parsed:
    """The stripped contents of every `<tag>...</tag>` in `visible`, in order (none nested or unclosed)."""
    found, pos = [], 0
    opens = visible.count(f"<{tag}>")
    while (start := visible.find(f"<{tag}>", pos)) >= 0:
        end = visible.find(f"</{tag}>", start)
        following = visible.find(f"<{tag}>", start + 1)
        if end < 0 or 0 <= following < end:
            break
        found.append(visible[start + len(tag) + 2 : end].strip())
        pos = end + len(tag) + 3
    closes = visible.count(f"</{tag}>")
    if len(found) != opens or closes != opens:
        return _bad(f"unbalanced <{tag}> tags: {opens} opening and {closes} closing")
    return found


def parse_text(text: str) -> Parsed:
    return Parsed(True, text.strip())


# What a contract's parser receives after the text: nothing, the pool size, the words, the tag's name.
ParserArgs = tuple[int | str | tuple[str, ...], ...]


def _no_args(contract: str, pool_size: int | None, args: tuple[str, ...]) -> ParserArgs:
    return ()


def _pool(contract: str, pool_size: int | None, args: tuple[str, ...]) -> ParserArgs:
    if pool_size is None or pool_size < 1:
        raise ValueError(f"the {contract} contract needs a pool size >= 1, got {pool_size}")
    return (pool_size,)


def _words(contract: str, pool_size: int | None, args: tuple[str, ...]) -> ParserArgs:
    if not args:
        raise ValueError(f"the {contract} contract needs its allowed words")
    return (args,)


def _tag(contract: str, pool_size: int | None, args: tuple[str, ...]) -> ParserArgs:
    if len(args) != 1:
        raise ValueError(f"the {contract} contract needs exactly one tag name")
    return (args[0],)


ARGUMENTS: dict[str, Callable[[str, int | None, tuple[str, ...]], ParserArgs]] = {
    "none": _no_args,
    "pool": _pool,
    "words": _words,
    "tag": _tag,
    "actions": _words,
}
"""What a parser receives after the text, by the kind of its contract's arguments (`ContractSpec.args`)."""


def parse_output(
    contract: str, text: str, *, pool_size: int | None = None, args: tuple[str, ...] = ()
) -> Parsed:
    """Parse `text` under the named contract with its declared `args` (a `pool` contract also needs
    `pool_size`); ValueError for an unknown contract or missing arguments."""
    spec = CONTRACTS.lookup(contract)
    parsed: Parsed = spec.parser(text, *ARGUMENTS[spec.args](contract, pool_size, args))
    return parsed
