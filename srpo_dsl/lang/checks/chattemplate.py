"""A policy's `chat_template = "FILE"`: the chat template its model's tokenizer renders every message with
(`apply_chat_template`), read from a file relative to the workflow's folder. `validate` reads it and parses
it as Jinja, as transformers compiles chat templates (loop controls, the `{% generation %}` block that
marks assistant text), so a missing file or a syntax error is E019 at the option's value."""

from __future__ import annotations

from pathlib import Path

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(Extension):
    """`{% generation %}...{% endgeneration %}`: transformers' marker of assistant text (its body)."""

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        self.tags = {"generation"}  # the tags it parses (jinja2 declares them an instance's)

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


_JINJA = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols]
)


def read_chat_template(written: str, base: Path) -> tuple[str | None, str | None]:
    """(the template's text, None), or (None, why it cannot be the policy's chat template): the file
    `written` (relative to the workflow's folder `base`) is missing, unreadable or not Jinja."""
    path = Path(written) if Path(written).is_absolute() else base / written
    if not path.is_file():
        return None, f"`chat_template`: no file `{written}` (looked for {path})"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"`chat_template`: cannot read `{written}`: {exc}"
    try:
        _JINJA.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        return None, f"`chat_template`: `{written}` is not a Jinja template: line {exc.lineno}: {exc.message}"
    return text, None
