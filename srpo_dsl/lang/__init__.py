"""The language: parse, check and compile `.srpo` workflows into event graphs.

Names are imported on first use, so `srpo_dsl.lang.graph_formats` (the CLI's format choices) does
not pay for Lark, Jinja2 and pydantic.
"""

from __future__ import annotations

from srpo_dsl.lazy import lazy_exports

_EXPORTS = {
    "Result": "analysis",
    "analyze": "analysis",
    "load_graph": "analysis",
    "Checked": "check_context",
    "check": "checker",
    "compile_checked": "compiler",
    "Diagnostic": "messages",
    "Span": "messages",
    "SrpoError": "messages",
    "EventGraph": "graph",
    "parse": "parser",
    "parse_file": "parser",
    "STEP_KINDS": "steps",
    "Shape": "steps",
    "StepKind": "steps",
    "register_step": "steps",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
