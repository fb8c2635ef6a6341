"""The JSON schema a chat template is given for a tool (`apply_chat_template(..., tools=[...])`).

The shape is the one transformers' `get_json_schema` makes of a function: `{"type": "function",
"function": {"name", "description", "parameters": {"type": "object", "properties", "required"}}}`.
A tool has one argument, the query: a Python tool is called with a batch of them
(`def calc(queries: list[str], ...)`), so its schema's one property is the function's first parameter
(named as it is), typed as one item of that list; its description is the docstring's summary and the
parameter's line under `Args:` (Google style, as `get_json_schema` reads it). The function is read with
`ast` at check time, never imported. A retriever (`bm25`, `http`) takes a `query` string.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from srpo_dsl.jsonvalue import JsonObject, JsonValue
from srpo_dsl.lang.usercode.pycode import read_module, top_level
from srpo_dsl.lang.usercode.pysource import RefProblem

if TYPE_CHECKING:
    from srpo_dsl.lang.usercode.pycode import CodeRef

_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "dict": "object"}
_ARG = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTIONS = ("Args:", "Arguments:", "Returns:", "Raises:", "Yields:", "Example:", "Examples:")
RETRIEVER_QUERY = "what to search for"


def tool_schema(name: str, description: str, param: str, param_schema: JsonObject) -> str:
    """The schema, as JSON text (one source for the checker's graph and the runtime)."""
    schema = {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {param: param_schema}, "required": [param]},
        },
    }
    return json.dumps(schema, sort_keys=True)


def retriever_schema(name: str) -> str:
    """A built-in retriever's schema: one `query` string; it returns the passages that match it best."""
    summary = "Search the passages; returns the ones that match the query best."
    return tool_schema(name, summary, "query", {"type": "string", "description": RETRIEVER_QUERY})


def schema_of_tool(name: str, code: CodeRef | None) -> str:
    """The schema of the tool `name`: a retriever's (`code` None), else read from its function's `def`
    (a function bound otherwise, by an assignment or an import, has a `query` string and no description)."""
    if code is None:
        return retriever_schema(name)
    try:
        found = top_level(read_module(Path(code.file))).defs.get(code.function)
    except RefProblem:  # the checker reported it already: a schema is never a second error
        found = None
    node = found[0] if found is not None else None
    if not isinstance(node, ast.FunctionDef):
        return tool_schema(name, "", "query", {"type": "string"})
    return python_tool_schema(name, node)


def python_tool_schema(name: str, fn: ast.FunctionDef) -> str:
    """A Python tool's schema from its signature and docstring (`name`: the workflow's name for it)."""
    params = [*fn.args.posonlyargs, *fn.args.args]
    if not params:
        return tool_schema(name, _summary(fn), "query", {"type": "string"})
    first = params[0]
    item = _item_of(first.annotation)
    typed = annotation_schema(item) if item is not None else {"type": "string"}
    doc = _arg_docs(ast.get_docstring(fn) or "").get(first.arg)
    return tool_schema(name, _summary(fn), first.arg, {**typed, **({"description": doc} if doc else {})})


def _item_of(annotation: ast.expr | None) -> ast.expr | None:
    """`T` of a `list[T]` (or `Sequence[T]`, ...) annotation; the annotation itself otherwise."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        annotation = ast.parse(annotation.value, mode="eval").body
    if isinstance(annotation, ast.Subscript) and _name(annotation.value) in {"list", "List", "Sequence"}:
        return annotation.slice
    return annotation


def annotation_schema(node: ast.expr) -> JsonObject:
    """The JSON schema of a type annotation, as `get_json_schema` maps Python types (a string otherwise)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        return annotation_schema(ast.parse(node.value, mode="eval").body)
    if isinstance(node, ast.Subscript):
        outer = _name(node.value)
        if outer in {"list", "List", "Sequence"}:
            return {"type": "array", "items": annotation_schema(node.slice)}
        if outer == "Literal":
            values = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return {"type": "string", "enum": _json_values(values)}
        if outer in {"dict", "Dict"}:
            return {"type": "object"}
    return {"type": _TYPES.get(_name(node) or "", "string")}


def _json_values(nodes: list[ast.expr]) -> list[JsonValue]:
    """The literals JSON holds: strings, numbers, bools and None (not bytes, complex numbers, `...`)."""
    out: list[JsonValue] = []
    for node in nodes:
        if isinstance(node, ast.Constant) and (
            node.value is None or isinstance(node.value, (str, int, float))
        ):
            out.append(node.value)
    return out


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _summary(fn: ast.FunctionDef) -> str:
    """The docstring's text before its first section (`Args:`, ...), its lines kept (as transformers)."""
    doc = ast.get_docstring(fn) or ""
    lines = []
    for line in doc.splitlines():
        if line.strip() in _SECTIONS:
            break
        lines.append(line.strip())
    return "\n".join(lines).strip()


def _arg_docs(doc: str) -> dict[str, str]:
    """Each parameter's description under `Args:`, its continuation lines joined."""
    out: dict[str, str] = {}
    inside, last = False, None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in _SECTIONS:
            inside, last = stripped in {"Args:", "Arguments:"}, None
            continue
        found = _ARG.match(line) if inside else None
        if found:
            last = found.group(1)
            out[last] = found.group(2).strip()
        elif inside and last and stripped:
            out[last] = f"{out[last]} {stripped}"
    return out
