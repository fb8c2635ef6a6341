"""Hover on a declaration and on what it names: a policy's model and options, a tool's or an
environment's binding (a Python function's signature and how srpo-dsl calls it), an environment's
words, an output contract's form, an option's type, default and documentation (from the option
models of `schema`), a policy's, task's or tool's kind, a prompt's template file."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping

from lsprotocol import types as lsp
from pydantic import BaseModel

from srpo_dsl.lang.checks.schema import (
    POLICY_KINDS,
    TASK_KINDS,
    TOOL_KINDS,
    AgentOptions,
    BindingKind,
    Generation,
    LoraOptions,
    PythonEnv,
    PythonTool,
    TrainOptions,
)
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Span
from srpo_dsl.lang.usercode.pycode import USES
from srpo_dsl.lsp.completion import field_detail
from srpo_dsl.lsp.positions import contains
from srpo_dsl.lsp.pyrefs import describe, locate
from srpo_dsl.registries import CONTRACTS

_CONTRACT_FORM = {
    "none": "",
    "pool": "(POOL)",
    "words": "(WORD, ...)",
    "tag": "(TAG)",
    "actions": "(ACTION, ...)",
}
Found = tuple[str, Span]  # the Markdown, and the span it is about


def source_text(program: n.Program, span: Span) -> str:
    """The text of `span` in the program's source."""
    lines = program.source.splitlines()[span.line - 1 : span.end_line]
    if not lines:
        return ""
    if len(lines) == 1:
        return lines[0][span.col - 1 : span.end_col - 1]
    return "\n".join([lines[0][span.col - 1 :], *lines[1:-1], lines[-1][: span.end_col - 1]])


def _binding(program: n.Program, call: n.Call, use: str) -> str:
    """A declaration's binding: its text, and for Python code the function and how it is called."""
    shown = f"`{source_text(program, call.span)}`"
    if not isinstance(call.kind, n.Ref):
        return shown
    target = locate(call.kind.text, program.file)
    found = describe(target) if target is not None else f"`{call.kind.text}`: not found"
    return f"{shown}\n\ncalled as `{USES[use].shape}`\n\n{found}"


def policy_hover(program: n.Program, pol: n.Policy) -> str:
    options = ", ".join(source_text(program, o.span) for o in pol.options) or "none (the defaults)"
    lora = ", ".join(source_text(program, o.span) for o in pol.lora or ()) if pol.lora is not None else None
    parts = [f"**policy** `{pol.name.name}`", f"model: `{source_text(program, pol.source.span)}`"]
    parts += [f"options: `{options}`"] + ([f"lora: `{lora}`"] if lora is not None else [])
    return "\n\n".join(parts + (["frozen (not trained)"] if pol.frozen else []))


def tool_hover(program: n.Program, tool: n.Tool) -> str:
    return f"**tool** `{tool.name.name}` = {_binding(program, tool.source, 'tool')}"


def env_hover(program: n.Program, env: n.Env) -> str:
    words = ", ".join(f"`{source_text(program, c.span)}`" for c in env.emits) or "none"
    return f"**environment** `{env.name.name}` = {_binding(program, env.source, 'env')}\n\nemits: {words}"


def contract_hover(contract: n.Contract) -> str | None:
    if isinstance(contract.name, n.Ref):
        return f"**output contract**: a Python parser, called as `{USES['parser'].shape}`"
    spec = CONTRACTS.get(contract.name.name)
    if spec is None:
        return None
    return f"**output contract** `{contract.name.name}{_CONTRACT_FORM[spec.args]}`\n\n{spec.describe}"


def kind_hover(what: str, name: str, kind: BindingKind) -> str:
    model = kind.options
    args = f"({', '.join(kind.positional)})" if kind.positional else ""
    doc = inspect.cleandoc(model.__doc__ or "") if model.__doc__ != BaseModel.__doc__ else ""
    fields = "\n".join(f"- `{field_detail(k, v)}`" for k, v in model.model_fields.items())
    return "\n\n".join(p for p in [f"**{what} kind** `{name}{args}`", doc, fields] if p)


def option_hover(name: str, model: type[BaseModel]) -> str | None:
    info = model.model_fields.get(name)
    if info is None:
        return None
    return f"**option** `{field_detail(name, info)}`\n\n{info.description or ''}".rstrip()


def _kinded(call: n.Call, kinds: Mapping[str, BindingKind], what: str, ref_model) -> Iterator[tuple]:
    """(span, hover) pairs of a binding's kind and options."""
    if isinstance(call.kind, n.Ident) and call.kind.name in kinds:
        yield call.kind.span, kind_hover(what, call.kind.name, kinds[call.kind.name])
        model = kinds[call.kind.name].options
    else:
        model = ref_model
    yield from _options(call.args, model)


def _options(options: tuple[n.Option, ...] | None, model: type[BaseModel] | None) -> Iterator[tuple]:
    for opt in options or ():
        text = option_hover(opt.name, model) if opt.name and model is not None else None
        if text is not None:
            yield opt.span, text


def _places(program: n.Program) -> Iterator[tuple]:
    """Every (span, hover) of the declarations: their names, kinds, options and contracts."""
    for pol in program.policies:
        yield pol.name.span, policy_hover(program, pol)
        yield from _kinded(pol.source, POLICY_KINDS, "policy", None)
        yield from _options(pol.options, Generation)
        yield from _options(pol.lora, LoraOptions)
    for tool in program.tools:
        yield tool.name.span, tool_hover(program, tool)
        yield from _kinded(tool.source, TOOL_KINDS, "tool", PythonTool)
    for env in program.envs:
        yield env.name.span, env_hover(program, env)
        yield from _kinded(env.source, {}, "environment", PythonEnv)
        yield from ((c.span, contract_hover(c)) for c in env.emits)
    for task in program.tasks:
        yield from _kinded(task.source, TASK_KINDS, "task", None)
    for agent in program.agents:
        yield agent.contract.span, contract_hover(agent.contract)
        yield from _options(agent.options, AgentOptions)
    for train in program.trains:
        yield from _options(train.options, TrainOptions)


def declaration_hover(program: n.Program, at: lsp.Position) -> Found | None:
    """The innermost declaration part under `at` with something to say."""
    found = None
    for span, text in _places(program):
        if text and contains(span, at) and (found is None or _inside(span, found[1])):
            found = (text, span)
    return found


def _inside(span: Span, outer: Span) -> bool:
    return (span.line, span.col) >= (outer.line, outer.col) and (span.end_line, span.end_col) <= (
        outer.end_line,
        outer.end_col,
    )
