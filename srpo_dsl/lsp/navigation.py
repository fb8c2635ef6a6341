"""Go to definition and hover: declared names, template files and Python references."""

from __future__ import annotations

from pathlib import Path

import jinja2
from lsprotocol import types as lsp

from srpo_dsl.lang.checks.templates import TemplateLoader, TemplateUnreadable
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lsp.costs import step_hover
from srpo_dsl.lsp.declhover import declaration_hover, env_hover, policy_hover, source_text, tool_hover
from srpo_dsl.lsp.occurrences import Occurrence, declarations, occurrence_at
from srpo_dsl.lsp.positions import span_range
from srpo_dsl.lsp.pyrefs import describe, locate
from srpo_dsl.lsp.view import View

_START = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0))


def template_lookup(name: str, workflow: str) -> Path | str:
    """The file a prompt names, looked up as the checker and runtime do (the workflow's folder first),
    else why there is none, in words."""
    try:
        return TemplateLoader([Path(workflow).resolve().parent]).find(name)
    except TemplateUnreadable as exc:
        return f"cannot be read: {exc.reason}"
    except jinja2.TemplateNotFound:
        return "not found"


def _target(occ: Occurrence, view: View, uri: str) -> lsp.Location | None:
    program = view.tree
    if occ.kind == "template":
        found = template_lookup(occ.text, program.file)
        return lsp.Location(uri=found.as_uri(), range=_START) if isinstance(found, Path) else None
    if occ.kind == "ref":
        target = locate(occ.text, program.file)
        if target is None:
            return None
        at = lsp.Position(line=target.line - 1, character=0)
        return lsp.Location(uri=target.file.resolve().as_uri(), range=lsp.Range(start=at, end=at))
    decl = declarations(program)[occ.kind].get(occ.text)
    shown = view.shown(span_range(decl.name.span)) if decl else None
    return lsp.Location(uri=uri, range=shown) if shown else None


def definition(view: View, uri: str, pos: lsp.Position) -> lsp.Location | None:
    """Where the name, prompt path or Python reference under `pos` is defined."""
    at = view.at(pos)
    occ = occurrence_at(view.tree, at) if at is not None else None
    return _target(occ, view, uri) if occ else None


def _agent_hover(agent: n.Agent, program: n.Program) -> str:
    policy = declarations(program)["policy"].get(agent.policy.name)
    bound = source_text(program, policy.source.span) if policy else "undeclared"
    contract = source_text(program, agent.contract.span)
    pool = f"K in 1..{agent.replicas} (pool of {agent.replicas})" if agent.pooled else "K = 1 (single agent)"
    return "\n\n".join(
        [
            f"**agent** `{agent.name.name}`",
            f"policy: `{agent.policy.name}` = `{bound}`",
            f"template: {_template_hover(agent.prompt, program)}",
            f"contract: `{contract}`",
            pool,
        ]
    )


def _template_hover(name: str, program: n.Program) -> str:
    return f'"{name}" ({template_lookup(name, program.file)})'


def _named_hover(occ: Occurrence, program: n.Program) -> str | None:
    """What a name, template path or Python reference under the cursor says."""
    decl = declarations(program).get(occ.kind, {}).get(occ.text)
    if isinstance(decl, n.Agent):
        return _agent_hover(decl, program)
    if isinstance(decl, n.Policy):
        return policy_hover(program, decl)
    if isinstance(decl, n.Tool):
        return tool_hover(program, decl)
    if isinstance(decl, n.Env):
        return env_hover(program, decl)
    if occ.kind == "template":
        return f"**template** {_template_hover(occ.text, program)}"
    if occ.kind == "ref" and (target := locate(occ.text, program.file)) is not None:
        return describe(target)
    return None


def hover(view: View, pos: lsp.Position) -> lsp.Hover | None:
    """An agent's policy, template, contract and K range; a policy's, tool's or environment's
    declaration; a template's file; a Python function's signature and docstring; a contract, kind or
    option (`declhover`); elsewhere in a step, its cost bounds."""
    program, at = view.tree, view.at(pos)
    if at is None:
        return None
    occ = occurrence_at(program, at)
    value = _named_hover(occ, program) if occ is not None else None
    if value is not None:
        span = occ.span
    elif (found := declaration_hover(program, at)) is not None:
        value, span = found
    else:
        return _step(view, at)
    content = lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=value)
    return lsp.Hover(contents=content, range=view.shown(span_range(span)))


def _step(view: View, at: lsp.Position) -> lsp.Hover | None:
    found = step_hover(view.good, at)
    if found is None:
        return None
    value, step = found
    return lsp.Hover(
        contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=value),
        range=view.shown(span_range(step.span)),
    )
