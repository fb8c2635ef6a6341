"""Static checks of role prompt templates (Jinja2 `meta`), reported at the `.srpo` position."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

import jinja2
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment

from srpo_dsl.lang.errors import Diagnostic, Span, did_you_mean
from srpo_dsl.lang.schema import CONTEXT_VARIABLES

PACKAGE_TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def template_search_path(dirs: Sequence[Path]) -> list[Path]:
    """Where role templates are looked up, by the checker and the runtime alike: the given folders
    (the workflow's folder), then the package's defaults."""
    return [*dirs, PACKAGE_TEMPLATES]


def _line_of(source: str, name: str) -> int:
    match = re.search(rf"\b{re.escape(name)}\b", source)
    return source.count("\n", 0, match.start()) + 1 if match else 1


def check_template(name: str, at: Span, dirs: list[Path]) -> list[Diagnostic]:
    """Missing template, syntax error, or a variable the runtime does not provide."""
    return [
        Diagnostic(code, message, at, hint) for code, message, hint in _template_problems(name, tuple(dirs))
    ]


@functools.lru_cache(maxsize=256)
def _environment(dirs: tuple[Path, ...]) -> SandboxedEnvironment:
    return SandboxedEnvironment(loader=jinja2.FileSystemLoader(template_search_path(dirs)))


@functools.lru_cache(maxsize=1024)
def _template_problems(name: str, dirs: tuple[Path, ...]) -> tuple[tuple[str, str, str | None], ...]:
    """(code, message, hint) for each problem; cached, since workflows share templates."""
    env = _environment(dirs)
    diags: list[tuple[str, str, str | None]] = []
    seen: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            source = env.loader.get_source(env, current)[0]  # type: ignore[union-attr]
        except jinja2.TemplateNotFound:
            where = ", ".join(str(d) for d in dirs) or "."
            what = "template" if current == name else f"template `{current}` (included by `{name}`)"
            diags.append(("E080", f"{what} not found", f"looked in {where} and the package defaults"))
            continue
        try:
            tree = env.parse(source, name=current)
        except jinja2.TemplateSyntaxError as exc:
            diags.append(("E081", f"template `{current}` line {exc.lineno}: {exc.message}", None))
            continue
        for var in sorted(meta.find_undeclared_variables(tree) - CONTEXT_VARIABLES):
            diags.append(
                (
                    "E082",
                    f"template `{current}` line {_line_of(source, var)} uses `{var}`, which no step provides",
                    did_you_mean(var, CONTEXT_VARIABLES)
                    or f"available: {', '.join(sorted(CONTEXT_VARIABLES))}",
                )
            )
        pending.extend(t for t in meta.find_referenced_templates(tree) if t is not None)
    return tuple(diags)
