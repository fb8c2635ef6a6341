"""Settings: an option of a declared tool replaced for one command, without editing the workflow file.

`srpo-dsl run|eval|train|sweep ... --set tool.search.url=http://HOST:PORT/retrieve` (and the Python
API's `srpo_dsl.load(path, settings={"tool.search.url": ...})`) points a shipped workflow's tool
elsewhere. A key is `tool.NAME.OPTION`; NAME a declared tool, OPTION one its kind takes (a built-in kind's
options; for a Python tool, srpo-dsl's own `timeout` and `batch` and the options its declaration passes
to the function). The value is checked as the declaration's would be. The program, so the graph's hash,
is unchanged: where a tool's server runs is not part of what is trained.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from srpo_dsl.lang.checks.declarations import Binding
from srpo_dsl.lang.checks.schema import TOOL_KINDS, PythonTool
from srpo_dsl.lang.compile.graph import EventGraph, ToolNode
from srpo_dsl.lang.syntax.messages import did_you_mean
from srpo_dsl.lang.usercode.pycode import TOOL_OPTIONS

B = TypeVar("B", bound=Binding)

SETTABLE = ("tool",)  # the declarations a setting may change: `tool.NAME.OPTION`


class SettingError(ValueError):
    """A setting that names no declared tool or option, or a value the option does not take (one line)."""


def apply_settings(graph: EventGraph, settings: Mapping[str, object]) -> EventGraph:
    """`graph` with each `tool.NAME.OPTION = value` of `settings` in place of the declaration's option."""
    if not settings:
        return graph
    tools = dict(graph.tools)
    for key, value in settings.items():
        try:
            name, option = _target(key, tools)
            tools[name] = _with_option(name, tools[name], option, value)
        except SettingError as exc:
            raise SettingError(f"{key}={value}: {exc}") from None
    nodes = {
        i: dataclasses.replace(v, top_k=tools[v.tool].options.get("top_k"))
        if isinstance(v, ToolNode) and tools[v.tool].code is None
        else v
        for i, v in graph.nodes.items()
    }
    return dataclasses.replace(graph, tools=tools, nodes=nodes)


def _target(key: str, tools: Mapping[str, Binding]) -> tuple[str, str]:
    """(tool, option) of `tool.NAME.OPTION`."""
    parts = key.split(".")
    if len(parts) != 3 or parts[0] not in SETTABLE or not all(parts):
        raise SettingError("a setting is written tool.NAME.OPTION=VALUE, e.g. tool.search.url=URL")
    if parts[1] not in tools:
        known = ", ".join(tools) or "none"
        hint = did_you_mean(parts[1], tools)
        raise SettingError(f"no tool `{parts[1]}` in the workflow ({hint or 'its tools: ' + known})")
    return parts[1], parts[2]


def _with_option(name: str, tool: B, option: str, value: object) -> B:
    """The binding with `option` set to `value`, validated as the declaration's options are."""
    if tool.code is not None:  # the user's Python: srpo-dsl's options, or one the declaration passes on
        names = sorted({*TOOL_OPTIONS, *tool.options})
        _known(name, "Python tool", option, names)
        kept = {k: v for k, v in tool.options.items() if k in TOOL_OPTIONS}
        if option in TOOL_OPTIONS:
            _validated(PythonTool, {**kept, option: value})
            return dataclasses.replace(tool, options={**tool.options, option: value})
        return dataclasses.replace(tool, options={**tool.options, option: _literal(value)})
    model = TOOL_KINDS.lookup(tool.kind).options
    _known(name, f"`{tool.kind}` tool", option, sorted(model.model_fields))
    checked = _validated(model, {**tool.options, option: value})
    return dataclasses.replace(tool, options={**tool.options, option: checked[option]})


def _known(name: str, what: str, option: str, names: list[str]) -> None:
    if option not in names:
        hint = did_you_mean(option, names)
        known = f"{hint}; options: " if hint else "options: "
        raise SettingError(f"the {what} `{name}` has no option `{option}` ({known}{', '.join(names)})")


def _validated(model: type[BaseModel], options: Mapping[str, object]) -> dict[str, object]:
    try:
        return model(**options).model_dump()
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SettingError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def _literal(value: object) -> object:
    """A command line's text as the language reads a value: a number, true or false, else the text."""
    if not isinstance(value, str):
        return value
    if value in ("true", "false"):
        return value == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value
