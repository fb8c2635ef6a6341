"""What the cursor is on: a declared name (where declared or used), a template path or a Python reference."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lsprotocol import types as lsp

from srpo_dsl.lang.checks.check_context import contract_actions
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Span
from srpo_dsl.lang.usercode.pycode import is_reference
from srpo_dsl.lsp.positions import contains, span_range
from srpo_dsl.registries import CONTRACTS


@dataclass(frozen=True)
class Occurrence:
    """`kind`: "agent", "policy", "tool", "env" (a name), "template" or "ref" (a path or reference)."""

    kind: str
    text: str
    span: Span


def declarations(p: n.Program) -> dict[str, dict[str, n.Agent | n.Policy | n.Tool | n.Env]]:
    """{kind: {name: its declaration}}."""
    return {
        "agent": {a.name.name: a for a in p.agents},
        "policy": {x.name.name: x for x in p.policies},
        "tool": {x.name.name: x for x in p.tools},
        "env": {x.name.name: x for x in p.envs},
    }


def _name(kind: str, ident: n.Ident | None) -> Iterator[Occurrence]:
    if ident is not None:
        yield Occurrence(kind, ident.name, ident.span)


# The options whose value is a template path (`observe = "chat/observe.j2"`), as a prompt's is.
TEMPLATE_OPTIONS = frozenset({"observe"})


def _options(options: tuple[n.Option, ...], names: dict[str, str]) -> Iterator[Occurrence]:
    for opt in options:
        value, span = opt.value, opt.value_span or opt.span
        if opt.name in TEMPLATE_OPTIONS and isinstance(value, str):
            yield Occurrence("template", value, span)
        elif isinstance(value, n.Symbol) and value.name in names:
            yield Occurrence(names[value.name], value.name, span)
        elif is_reference(value):
            yield Occurrence("ref", str(value), span)


def _call(call: n.Call, names: dict[str, str]) -> Iterator[Occurrence]:
    if isinstance(call.kind, n.Ref):
        yield Occurrence("ref", call.kind.text, call.kind.span)
    yield from _options(call.args, names)


def _pools(contract: n.Contract) -> Iterator[Occurrence]:
    """The pools a selecting contract names (`route(solver)`)."""
    name = contract.name.name if isinstance(contract.name, n.Ident) else ""
    if name in CONTRACTS and CONTRACTS[name].selects:
        for ident in contract.args:
            yield from _name("agent", ident)


def _actions(words, actions: tuple[str, ...], names: dict[str, str]) -> Iterator[Occurrence]:
    """The actions among `words` that name a tool (`act(search, answer)`: a tool serves the members whose
    action is its name, so the action is renamed with it)."""
    for ident in words:
        if ident.name in actions and names.get(ident.name) == "tool":
            yield from _name("tool", ident)


def _declared(p: n.Program, names: dict[str, str]) -> Iterator[Occurrence]:
    for pol in p.policies:
        yield from _name("policy", pol.name)
        yield from _call(pol.source, names)
        yield from _options(pol.options, names)
    for decl, kind in [(t, "tool") for t in p.tools] + [(e, "env") for e in p.envs]:
        yield from _name(kind, decl.name)
        yield from _call(decl.source, names)
    for env in p.envs:
        for contract in env.emits:
            yield from _pools(contract)
    for task in p.tasks:
        yield from _call(task.source, names)
    for a in p.agents:
        yield from _name("agent", a.name)
        yield from _name("policy", a.policy)
        yield Occurrence("template", a.prompt, a.prompt_span)
        if a.system is not None and a.system_span is not None:
            yield Occurrence("template", a.system, a.system_span)
        if isinstance(a.contract.name, n.Ref):
            yield Occurrence("ref", a.contract.name.text, a.contract.name.span)
        yield from _pools(a.contract)
        yield from _actions(a.contract.args, contract_actions(a.contract), names)
        yield from _options(a.options, names)
    for r in p.rewards:
        kind = "ref" if isinstance(r.fn, n.Ref) else ("env" if r.fn.name in names else "")
        yield Occurrence(kind, r.fn.name if isinstance(r.fn, n.Ident) else r.fn.text, r.fn.span)
        yield from _name("agent", r.agent)
    for t in p.trains:
        yield from _options(t.options, names)


def _in_steps(
    steps: tuple[n.Step, ...], names: dict[str, str], acts: dict[str, tuple[str, ...]]
) -> Iterator[Occurrence]:
    """`names`: every declared name -> its kind (`by` and a condition may name an agent or an environment);
    `acts`: each agent's actions (`only` and a condition's word may be a tool's name)."""
    for s in n.walk_steps(steps):
        if isinstance(s, n.EventStep):
            for ident in s.agents:
                yield from _name("agent", ident)
            if s.by is not None:
                yield from _name(names.get(s.by.name, "agent"), s.by)
            yield from _actions(s.only or (), acts.get(s.agent.name, ()), names)
        elif isinstance(s, n.CallTool):
            yield from _name("tool", s.tool)
            yield from _name("agent", s.agent)
        elif isinstance(s, n.EnvStep):
            yield from _name("env", s.env)
            for ident in s.on:
                yield from _name("agent", ident)
        elif isinstance(s, (n.Repeat, n.If, n.Break)):
            cond = s.until if isinstance(s, n.Repeat) else s.cond
            if cond is not None:
                yield from _name(names.get(cond.agent.name, "agent"), cond.agent)
                if cond.field is None:
                    yield from _actions((cond.word,), acts.get(cond.agent.name, ()), names)


def occurrences(p: n.Program) -> list[Occurrence]:
    """Every declared name, template path and Python reference of `p`, where declared or used."""
    names = {name: kind for kind, decls in declarations(p).items() for name in decls}
    acts = {a.name.name: contract_actions(a.contract) for a in p.agents}
    return [occ for occ in (*_declared(p, names), *_in_steps(p.steps, names, acts)) if occ.kind]


def occurrence_at(p: n.Program, pos: lsp.Position) -> Occurrence | None:
    """The innermost occurrence under `pos` (the last found: names come after the spans holding them)."""
    found = None
    for occ in occurrences(p):
        if contains(occ.span, pos):
            found = occ
    return found


def inside(occ: Occurrence) -> lsp.Range:
    """The range of a name, or of a template path or Python reference without its quotes."""
    rng = span_range(occ.span)
    if occ.kind in ("template", "ref"):
        rng.start.character += 1
        rng.end.character -= 1
    return rng
