"""textDocument/documentSymbol: the workflow, its declarations and its steps, with their ranges."""

from __future__ import annotations

import functools

from lsprotocol import types as lsp

from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Span, SrpoError
from srpo_dsl.lang.syntax.parser import parse
from srpo_dsl.lsp.positions import span_range, whole_document
from srpo_dsl.lsp.view import View

K = lsp.SymbolKind


@functools.lru_cache(maxsize=4)
def parsed(text: str, path: str) -> n.Program | None:
    """The syntax tree of `text`, or None when it has syntax errors (quick fixes, folding, links,
    rename read the current text; symbols, hover and definition the last good one: View). The trees
    are immutable: the last few are kept, so the requests on one text parse it once."""
    try:
        return parse(text, path)
    except SrpoError:
        return None


def _symbol(
    name: str, kind: lsp.SymbolKind, span: Span, at: Span | None = None, detail: str = "", children=()
) -> lsp.DocumentSymbol:
    return lsp.DocumentSymbol(
        name=name,
        kind=kind,
        range=span_range(span),
        selection_range=span_range(at or span),
        detail=detail or None,
        children=list(children),
    )


def _kind_name(call: n.Call) -> str:
    return call.kind.name if isinstance(call.kind, n.Ident) else call.kind.text


def _declarations(p: n.Program) -> list[lsp.DocumentSymbol]:
    out = [_symbol(x.name.name, K.Object, x.span, x.name.span, "policy") for x in p.policies]
    out += [_symbol(_kind_name(x.source), K.Package, x.span, x.source.kind.span, "task") for x in p.tasks]
    out += [_symbol(x.name.name, K.Function, x.span, x.name.span, "tool") for x in p.tools]
    out += [_symbol(x.name.name, K.Module, x.span, x.name.span, "env") for x in p.envs]
    for a in p.agents:
        shown = f"{a.name.name}[{a.replicas}]" if a.pooled else a.name.name
        out.append(_symbol(shown, K.Class, a.span, a.name.span, f"agent uses {a.policy.name}"))
    for r in p.rewards:
        fn = r.fn.name if isinstance(r.fn, n.Ident) else r.fn.text
        out.append(_symbol(f"reward {fn}", K.Constant, r.span, r.fn.span, "reward"))
    out += [_symbol("train", K.Property, t.span, detail="train with (...)") for t in p.trains]
    return out


def step_name(step: n.Step) -> str:
    if isinstance(step, n.EventStep):
        return f"{step.kind} {', '.join(a.name for a in step.agents)}"
    if isinstance(step, n.CallTool):
        return f"call {step.tool.name} on {step.agent.name}"
    if isinstance(step, n.EnvStep):
        on = f" on {', '.join(a.name for a in step.on)}" if step.on else ""
        return f"step {step.env.name}{on}"
    if isinstance(step, n.Repeat):
        return "repeat" if step.bound is None else f"repeat at most {step.bound}"
    if isinstance(step, n.If):
        return f"if {_cond(step.cond)}"
    return f"break if {_cond(step.cond)}"


def _cond(c: n.Cond) -> str:
    """A condition as written: `verifier == approve`, `solver.finish != length`."""
    subject = c.agent.name if c.field is None else f"{c.agent.name}.{c.field.name}"
    return f"{subject} {c.op} {c.word.name}"


def _steps(steps: tuple[n.Step, ...]) -> list[lsp.DocumentSymbol]:
    return [
        _symbol(step_name(s), K.Event, s.span, children=_steps(tuple(x for b in s.blocks for x in b)))
        for s in steps
    ]


def _shown(view: View, symbols: list[lsp.DocumentSymbol]) -> list[lsp.DocumentSymbol]:
    """The symbols whose ranges lie on lines left alone since `view`'s tree (`View.shown`), moved there;
    one that touches an edited line is left out, and what it holds with it."""
    out = []
    for s in symbols:
        rng, at = view.shown(s.range), view.shown(s.selection_range)
        if rng is not None and at is not None:
            s.range, s.selection_range, s.children = rng, at, _shown(view, s.children or [])
            out.append(s)
    return out


def document_symbols(view: View) -> list[lsp.DocumentSymbol]:
    """One symbol for the workflow (the whole current text) holding its declarations and steps."""
    program = view.tree
    children = _declarations(program) + _steps(program.steps)
    if not view.lines.unchanged:
        children = _shown(view, children)
    whole = whole_document(view.text)
    name = view.shown(span_range(program.name.span)) or lsp.Range(start=whole.start, end=whole.start)
    top = lsp.DocumentSymbol(
        name=program.name.name,
        kind=K.Namespace,
        range=whole,
        selection_range=name,
        detail="workflow",
        children=children,
    )
    return [top]


def declaration_symbols(p: n.Program) -> list[lsp.DocumentSymbol]:
    """The declarations of `p`, without its steps: what workspace/symbol lists of each workflow."""
    return _declarations(p)
