"""The sandbox role templates are checked, compiled and rendered in: Jinja2's `SandboxedEnvironment`,
bounded in time and memory (docs/dsl.md).

Jinja2 folds constant expressions while it compiles (`{{ 9 ** 99999999 }}`, `{% set x = 'a' * 10**10 %}`),
outside the sandbox's limits: one such line held `validate` for minutes and gigabytes. Here the operators
that can grow a value (`*`, `**`, `+`, `%`) are never folded: they run at render time, where each is
refused (`TooBig`) before it would build a string or list over `MAX_LENGTH` items or an integer over
`MAX_INT_BITS` bits. So are the filters and string methods whose argument sets a width
(`'a' | center(10**10)`, `'a'.ljust(10**10)`). `oversized_constants` finds such a constant in a parsed
template, for the checker to name its line.
"""

from __future__ import annotations

import functools
import operator
import re
import string
import types
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment, SecurityError

MAX_LENGTH = 10_000_000  # characters of a string, items of a list: 10 MB of prompt is far past any model
MAX_INT_BITS = 100_000  # an integer of 30,000 digits; Python will not print one over 4,300 anyway
WIDTH_FILTERS = frozenset({"batch", "center", "format", "indent", "slice", "tojson"})
WIDTH_METHODS = frozenset({"center", "expandtabs", "ljust", "rjust", "zfill"})  # and `format`, `format_map`
LIMITS = (  # the checker's hint
    f"a template may build strings and lists of up to {MAX_LENGTH:,} items, numbers of up to "
    f"{MAX_INT_BITS:,} bits"
)
_OPERATORS: dict[str, Callable[[object, object], object]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
}
METHODS = (types.MethodType, types.BuiltinMethodType)  # what Jinja2's `wrap_str_format` wraps
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?")  # of %-formatting


class TooBig(SecurityError):
    """An operation the sandbox refuses: its result would be over the size limits."""


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _bits(value: int) -> int:
    return max(abs(value).bit_length(), 1)


def _sized(value: object) -> TypeGuard[str | bytes | list[object] | tuple[object, ...]]:
    return isinstance(value, (str, bytes, list, tuple))


def _specs(fmt: str, style: str) -> list[str]:
    """The conversion specs of `fmt`: %-formatting's (`style` "%": the `%` operator, the `format` filter),
    or the format specs of `str.format`'s fields (`style` "{}", as Python parses them; none if it cannot)."""
    if style == "%":
        return _PERCENT_SPEC.findall(fmt)
    try:
        return [spec for _, _, spec, _ in string.Formatter().parse(fmt) if spec]
    except ValueError:  # not a format string: `format` says so itself
        return []


def _too_wide(fmt: str, args: object, style: str) -> str | None:
    """Why formatting `args` with `fmt` is refused: a width written in it, or one taken from the
    arguments (`%*d`, `{:>{}}`), over `MAX_LENGTH`; or None."""
    specs = _specs(fmt, style)
    widest = max((int(digits) for spec in specs for digits in re.findall(r"\d+", spec)), default=0)
    if any("*" in spec or "{" in spec for spec in specs):  # a width from the arguments
        values = args if isinstance(args, tuple) else (args,)
        widest = max([widest, *(abs(v) for v in values if _is_int(v))])
    return f"a format width of {widest:,} (the limit is {MAX_LENGTH:,})" if widest > MAX_LENGTH else None


def _result_size(op: str, left: object, right: object) -> tuple[int, int, str] | None:
    """(size, limit, unit) of what `left op right` would build, for an operator that can grow a value."""
    if op == "**" and _is_int(left) and _is_int(right) and right > 0 and _bits(left) > 1:
        return _bits(left) * right, MAX_INT_BITS, "bits"
    if op == "*" and _is_int(left) and _is_int(right):
        return _bits(left) + _bits(right), MAX_INT_BITS, "bits"
    if op == "*" and _sized(left) and _is_int(right):
        return len(left) * right, MAX_LENGTH, "items"
    if op == "*" and _sized(right) and _is_int(left):
        return len(right) * left, MAX_LENGTH, "items"
    if op == "+" and _sized(left) and _sized(right):
        return len(left) + len(right), MAX_LENGTH, "items"
    return None


def _grown(op: str, left: object, right: object) -> str | None:
    """Why `left op right` is refused: its result would be over the limits; None if it may run."""
    if op == "%" and isinstance(left, str):
        return _too_wide(left, right, "%")
    sized = _result_size(op, left, right)
    if sized is None or sized[0] <= sized[1]:
        return None
    size, limit, unit = sized
    what = f"a number of about {size:,} bits" if unit == "bits" else f"{size:,} items"
    return f"{what} (the limit is {limit:,})"


def check_binop(op: str, left: object, right: object) -> None:
    """`TooBig` if `left op right` would build a value over the limits."""
    why = _grown(op, left, right)
    if why is not None:
        raise TooBig(f"`{op}` would build {why}")


def _width_args(name: str, args: tuple[object, ...], kwargs: Mapping[str, object]) -> None:
    """`TooBig` if a width filter or method is given an int over `MAX_LENGTH`, or a format string wider."""
    for value in [*args, *kwargs.values()]:
        if _is_int(value) and abs(value) > MAX_LENGTH:
            raise TooBig(f"`{name}` would build {value:,} items (the limit is {MAX_LENGTH:,})")


def _format_args(name: str, fmt: str, args: tuple[object, ...], style: str) -> None:
    """`TooBig` if formatting `args` with `fmt` (`style` "%": the `format` filter; "{}": `str.format`)
    would be wider than `MAX_LENGTH`."""
    why = _too_wide(fmt, args, style)
    if why is not None:
        raise TooBig(f"`{name}` would build {why}")


def _bounded_filter(name: str, func: Callable[..., object]) -> Callable[..., object]:
    """`func` (a width filter), refusing a width over the limit before it runs (also when Jinja2 calls it
    to fold a constant at compile time)."""
    skip = 2 if getattr(func, "jinja_pass_arg", None) is not None else 1  # its context and value, or value

    @functools.wraps(func)
    def bounded(*args: object, **kwargs: object) -> object:
        if name != "format":
            _width_args(name, args[skip:], kwargs)
        elif isinstance(fmt := args[skip - 1], str):
            _format_args(name, fmt, (*args[skip:], *kwargs.values()), "%")
        return func(*args, **kwargs)

    return bounded


class BoundedSandbox(SandboxedEnvironment):
    """A `SandboxedEnvironment` whose growing operators, width filters and width methods are bounded."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})  # also what Jinja2 never folds at compile time

    def __init__(self, **options: Any):
        super().__init__(**options)
        for name in WIDTH_FILTERS & set(self.filters):
            self.filters[name] = _bounded_filter(name, self.filters[name])

    def call_binop(self, context: Context, operator: str, left: object, right: object) -> object:
        check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Context, __obj: object, *args: object, **kwargs: object) -> object:
        name = getattr(__obj, "__name__", "")
        if isinstance(getattr(__obj, "__self__", None), str) and name in WIDTH_METHODS:
            _width_args(name, args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: object) -> Callable[..., str] | None:
        sandboxed = super().wrap_str_format(value)
        if sandboxed is None or not isinstance(value, METHODS) or not isinstance(value.__self__, str):
            return None  # (Jinja2 wraps a str's `format` or `format_map` method: never None here)
        fmt, name = value.__self__, value.__name__

        def bounded(*args: object, **kwargs: object) -> str:
            mapping = args[0] if name == "format_map" and args and isinstance(args[0], Mapping) else {}
            _format_args(name, fmt, (*args, *kwargs.values(), *mapping.values()), "{}")
            return sandboxed(*args, **kwargs)

        return bounded


class _NotConstant(Exception):
    """An expression whose value is only known at render time (or whose folding fails there)."""


def _fold(node: nodes.Node) -> object:
    """The value of the constant expression `node`, folded within the limits (`TooBig` past them)."""
    if isinstance(node, nodes.Const):
        return node.value
    if isinstance(node, (nodes.Tuple, nodes.List)):
        items = [_fold(item) for item in node.items]
        return tuple(items) if isinstance(node, nodes.Tuple) else items
    if isinstance(node, nodes.Neg):
        value = _fold(node.node)
        if not isinstance(value, (int, float)):
            raise _NotConstant
        return -value
    if isinstance(node, nodes.BinExpr) and node.operator in _OPERATORS:
        left, right = _fold(node.left), _fold(node.right)
        check_binop(node.operator, left, right)
        try:
            return _OPERATORS[node.operator](left, right)
        except Exception as exc:  # `1 / 0`, `'a' - 1`: the renderer says so, at render time
            raise _NotConstant from exc
    raise _NotConstant


def _check_filter(node: nodes.Filter) -> None:
    """`TooBig` if the width filter `node`, its arguments constant, would build a value over the limits."""
    args = tuple(_fold(arg) for arg in node.args)
    kwargs = {kw.key: _fold(kw.value) for kw in node.kwargs}
    if node.name != "format":
        _width_args(node.name, args, kwargs)
    elif node.node is not None and isinstance(fmt := _fold(node.node), str):
        _format_args(node.name, fmt, (*args, *kwargs.values()), "%")


def oversized_constants(tree: nodes.Template) -> dict[int, str]:
    """Line -> why, for each line of the parsed template `tree` with a constant expression (or a width
    filter given constants) that would build a value over the limits: `{{ 9 ** 99999999 }}`."""
    found: dict[int, str] = {}
    for node in tree.find_all((nodes.BinExpr, nodes.Filter)):
        try:
            if isinstance(node, nodes.BinExpr):
                _fold(node)
            elif isinstance(node, nodes.Filter) and node.name in WIDTH_FILTERS:
                _check_filter(node)
        except TooBig as exc:
            found.setdefault(node.lineno, str(exc.message))
        except _NotConstant:
            continue
    return found
