"""The checks of option blocks (`with (...)`, a kind's arguments, `train with (...)`) against the pydantic
models that define their options (`srpo_dsl.lang.checks.schema`), each problem reported at the option; and of
the bindings they configure: `kind(...)`, or the user's Python `"file.py:function"(...)`."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from srpo_dsl.lang.checks.check_context import CheckContext
from srpo_dsl.lang.checks.declarations import Binding
from srpo_dsl.lang.checks.schema import BindingKind, PythonEnv, PythonTool
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Span, did_you_mean
from srpo_dsl.lang.usercode.pycode import ENV_OPTIONS, TOOL_OPTIONS, UseName
from srpo_dsl.registries import Registry

M = TypeVar("M", bound=BaseModel)

# What srpo-dsl keeps of the options of a Python tool or environment (the rest go to the function).
_KEPT_OPTIONS: dict[str, tuple[type[BaseModel], tuple[str, ...]]] = {
    "tool": (PythonTool, TOOL_OPTIONS),
    "env": (PythonEnv, ENV_OPTIONS),
}
# The declarations whose binding may be Python code, and what that code is called for.
CODE_USES: dict[str, UseName] = {"task": "loader", "tool": "tool", "env": "env"}


def option_value(v: n.Value) -> object:
    """An option's value as the model reads it: a bare name is its string, a list a list of them."""
    if isinstance(v, tuple):
        return [option_value(x) for x in v]
    return v.name if isinstance(v, n.Symbol) else v


def check_options(
    ctx: CheckContext,
    model: type[M],
    opts: tuple[n.Option, ...],
    what: str,
    positional: tuple[str, ...] = (),
    anchor: Span | None = None,
) -> M | None:
    """The options validated by `model` (an instance of it); None after reporting what is wrong.

    `positional`: the names of the options that may be written without one, in order. A value the model
    refuses is reported at its option; one that is missing at `anchor` (default: the first option, or the
    workflow's name).
    """
    named = _name_options(ctx, model, opts, what, positional)
    if named is None:
        return None
    data, spans = named
    try:
        return model(**data)
    except ValidationError as exc:
        for err in exc.errors():
            key = str(err["loc"][0]) if err["loc"] else ""
            span = spans.get(key, anchor or (opts[0].span if opts else ctx.program.name.span))
            msg = err["msg"].replace("Input should be", "must be").replace("Field required", "is required")
            ctx.error("E024", f"{what}: `{key}` {msg}", span)
        return None


def _name_options(
    ctx: CheckContext,
    model: type[BaseModel],
    opts: tuple[n.Option, ...],
    what: str,
    positional: tuple[str, ...],
) -> tuple[dict[str, object], dict[str, Span]] | None:
    """Each option's value and span by its name; None after reporting every option that has no name left
    (E024), is given twice (E024) or is not the model's (E023)."""
    data: dict[str, object] = {}
    spans: dict[str, Span] = {}
    ok = True
    for i, opt in enumerate(opts):
        name = opt.name
        if name is None:
            if i >= len(positional):
                ctx.error(
                    "E024",
                    f"{what} takes {len(positional)} positional argument(s)",
                    opt.span,
                    f"name it: `key = value` (known: {', '.join(model.model_fields)})",
                )
                ok = False
                continue
            name = positional[i]
        if name in data:
            ctx.error("E024", f"option `{name}` is given twice", opt.span)
            ok = False
            continue
        if name not in model.model_fields:
            ctx.error(
                "E023",
                f"unknown option `{name}` for {what}",
                opt.span,
                did_you_mean(name, model.model_fields) or f"known options: {', '.join(model.model_fields)}",
            )
            ok = False
            continue
        data[name], spans[name] = option_value(opt.value), opt.span
    return (data, spans) if ok else None


def check_binding(
    ctx: CheckContext, call: n.Call, kinds: Registry[BindingKind], code: str, what: str
) -> Binding | None:
    """The validated `kind(...)` of a policy, task or tool, or None after reporting an unknown kind (`code`)
    or bad options."""
    kind = call.kind
    if isinstance(kind, n.Ref):
        return check_code_binding(ctx, call, kind, what)
    if kind.name not in kinds:
        ctx.error(
            code,
            f"unknown {what} kind `{kind.name}`",
            kind.span,
            did_you_mean(kind.name, kinds) or f"known: {', '.join(kinds)}",
        )
        return None
    spec = kinds[kind.name]
    opts = check_options(ctx, spec.options, call.args, f"{what} `{kind.name}`", spec.positional, call.span)
    return Binding(kind.name, opts.model_dump()) if opts is not None else None


def check_code_binding(ctx: CheckContext, call: n.Call, ref: n.Ref, what: str) -> Binding | None:
    """A task loader, a tool or an environment written in Python: `"file.py:function"(key = value, ...)`.
    The options srpo-dsl keeps (a tool's `timeout`, ...) are validated; the others are passed to the
    function, whose signature must take them."""
    if what == "policy":
        ctx.error("E095", "a policy is a model, not Python code", ref.span, 'e.g. `hf("Qwen/Qwen3-4B")`')
        return None
    for opt in call.args:
        if opt.name is None:
            ctx.error("E024", f"the options of Python code are named: `key = value` ({what})", opt.span)
            return None
    data = {o.name: option_value(o.value) for o in call.args if o.name is not None}  # every one, named
    use = CODE_USES[what]
    model, kept = _KEPT_OPTIONS.get(use, (None, ()))
    if model is not None:
        ours = tuple(o for o in call.args if o.name in kept)  # the rest go to the function
        opts = check_options(ctx, model, ours, f"Python {what}", (), call.span)
        if opts is None:
            return None
        data = {**opts.model_dump(), **data}
    passed = tuple(k for k in data if k not in kept)
    code = ctx.locate_code(ref, use, passed)
    return Binding("python", data, code) if code is not None else None
