"""The language: parse, check and compile `.srpo` workflows into event graphs.

Each stage has its room (a sub-package whose docstring says what it holds and may import): `syntax` (text
to syntax tree), `usercode` (the user's Python, read with `ast`), `checks` (the tree checked and resolved),
`compile` (the event graph), and `tooling` (the formatter and the editor grammars, outside the compiler).
`analysis` runs the stages in order; the names below are the front door to them.

Names are imported on first use, so `srpo_dsl.lang.compile.graph_formats` (the CLI's format choices) does
not pay for Lark, Jinja2 and pydantic.
"""

from __future__ import annotations

from srpo_dsl.lazy import lazy_exports

_EXPORTS = {
    "Result": "analysis",
    "analyze": "analysis",
    "load_graph": "analysis",
    "Checked": "checks.check_context",
    "check": "checks.checker",
    "compile_checked": "compile.compiler",
    "Diagnostic": "syntax.messages",
    "Span": "syntax.messages",
    "SrpoError": "syntax.messages",
    "EventGraph": "compile.graph",
    "parse": "syntax.parser",
    "parse_file": "syntax.parser",
    "STEP_KINDS": "syntax.steps",
    "Shape": "syntax.steps",
    "StepKind": "syntax.steps",
    "register_step": "syntax.steps",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
