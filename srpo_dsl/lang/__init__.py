"""The language: parse, check and compile `.srpo` workflows into event graphs.

Names are imported on first use, so `srpo_dsl.lang.export` (the CLI's format choices) does
not pay for Lark, Jinja2 and pydantic.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "Result": "analysis",
    "analyze": "analysis",
    "load_graph": "analysis",
    "Checked": "checker",
    "check": "checker",
    "compile_checked": "compiler",
    "Diagnostic": "errors",
    "Span": "errors",
    "SrpoError": "errors",
    "EVENT_KINDS": "graph",
    "EventGraph": "graph",
    "parse": "parser",
    "parse_file": "parser",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
