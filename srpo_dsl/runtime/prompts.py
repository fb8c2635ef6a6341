"""Role prompts: sandboxed Jinja2 templates rendered from the executor's context.

Templates are looked up in the workflow's folders, then in the package defaults
(`srpo_dsl/templates/`); a template given as a path (absolute, or with `..`) is read from
that file, relative to the workflow's folder (`TemplateLoader`, shared with the checker).
Rendering is strict: an undefined variable is an error, never an empty string. The executor
provides the top-level names of `TEMPLATE_VARIABLES` (`srpo_dsl.lang.checks.schema`, each with its type and
what it holds; `CONTEXT_VARIABLES` are their names), as `Episode.context` builds them.

Besides Jinja2's filters, `shuffle` (`srpo_dsl.lang.checks.templates.FILTERS`): `{{ team_context | shuffle }}`
lists the items in an order drawn from the seed `render` is given.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from pathlib import Path

import jinja2
from jinja2 import StrictUndefined

from srpo_dsl.errors import InputError
from srpo_dsl.lang.checks.schema import CONTEXT_VARIABLES
from srpo_dsl.lang.checks.templates import FILTERS, SHUFFLE_SEED, TemplateLoader
from srpo_dsl.template_sandbox import BoundedSandbox

__all__ = ["CONTEXT_VARIABLES", "PromptError", "PromptRenderer"]


class PromptError(InputError):
    """A template that cannot be rendered (exit code 1): one line naming the template, and for a failure
    while rendering, its `FILE:LINE`."""


class PromptRenderer:
    """Renders role templates from `search_dirs`, then the package defaults."""

    def __init__(self, search_dirs: list[Path]):
        self._loader = TemplateLoader(search_dirs)
        self.search_dirs = [Path(p) for p in self._loader.searchpath]
        self._env = BoundedSandbox(
            loader=self._loader,
            undefined=StrictUndefined,
            keep_trailing_newline=False,
            autoescape=False,
            auto_reload=False,  # read once per run: no file check on every render of the hot loop
        )
        self._env.filters.update(FILTERS)

    def render(self, template: str, context: Mapping[str, object], shuffle_seed: int = 0) -> str:
        """The rendered prompt, `shuffle` drawing its order from `shuffle_seed`; `PromptError` for a missing
        template or variable, or anything the template raises while it renders (`{{ 1/0 }}`, a sandbox
        violation, a range or a value over the sandbox's limits)."""
        try:
            return self._env.get_template(template).render({**context, SHUFFLE_SEED: shuffle_seed})
        except jinja2.TemplateNotFound as exc:
            raise PromptError(
                f"template `{exc.name}` not found ({self._loader.looked_in(str(exc.name))})"
            ) from None
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(f"template `{exc.name or template}` line {exc.lineno}: {exc.message}") from None
        except Exception as exc:  # the template's own code failed: name where, as user code's errors do
            raise PromptError(f"{_where(exc)}template `{template}`: {_reason(exc)}") from None


def _where(exc: BaseException) -> str:
    """`FILE:LINE: ` of the innermost template line in `exc`'s traceback (Jinja rewrites the traceback so
    that a template's lines appear as frames of its file), or nothing."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith(".py")]
    frames = [f for f in frames if not f.filename.startswith("<")]
    return f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""


def _reason(exc: Exception) -> str:
    """What went wrong, one line: Jinja's own message, or the Python exception's type and message."""
    message = exc.message if isinstance(exc, jinja2.TemplateError) else None
    text = message or f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())
