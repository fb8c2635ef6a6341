"""The Python API's arguments checked at its edge, from each public function's own annotations
(`checked`) and the shared ranges (`argranges.BOUNDS`): a wrong type or value is one `UsageError`,
`NAME(ARG=VALUE): ARG must be EXPECTED, got TYPE` (docs/python.md, "Errors"), before the body runs.

The annotations understood: classes (`bool` is no `int`; `Path` takes any `os.PathLike`), `X | Y`,
`None`, `Any`, `Literal[...]` (a fixed choice of `srpo_dsl.choices`: one of its values), `Mapping[K, V]`,
`Sequence[X]` (not a str) and the aliases of such; a float must be finite, a number with a bound in
range.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any, TypeVar

from srpo_dsl.argranges import BOUNDS
from srpo_dsl.errors import UsageError

F = TypeVar("F", bound=Callable[..., object])
UNIONS = (typing.Union, types.UnionType)


def matches(value: object, hint: object) -> bool:
    """Whether `value` is of the annotation `hint` (no conversion)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if hint is None or hint is type(None):
        return value is None
    if origin in UNIONS:
        return any(matches(value, a) for a in args)
    if origin is not None and issubclass(origin, Mapping):
        return isinstance(value, Mapping) and all(
            matches(k, args[0]) and matches(v, args[1]) for k, v in value.items()
        )
    if origin is not None and issubclass(origin, Sequence):
        strings = isinstance(value, (str, bytes))
        return isinstance(value, Sequence) and not strings and all(matches(v, args[0]) for v in value)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return isinstance(value, os.PathLike)
    if isinstance(hint, type):
        return isinstance(value, hint)
    raise TypeError(f"srpo_dsl.arguments cannot check the annotation {hint!r}")


def described(hint: object) -> str:
    """`hint` in words: `a str or os.PathLike`, `an int or None`, `a mapping of str to str`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is None or hint is type(None):
        return "None"
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in UNIONS:
        return " or ".join(described(a) for a in args)
    if origin is not None and issubclass(origin, Mapping):
        return (
            f"a mapping of {described(args[0]).split(' ', 1)[-1]} to {described(args[1]).split(' ', 1)[-1]}"
        )
    if origin is not None and issubclass(origin, Sequence):
        return f"a sequence of ({described(args[0])})"
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return "os.PathLike"
    name = getattr(hint, "__name__", str(hint))
    return ("an " if name[0] in "aeiouAEIOU" else "a ") + name


def refusal(param: str, value: object, hint: object) -> str | None:
    """Why `value` cannot be `param` (`must be an int, got float`), or None when it can."""
    if not matches(value, hint):
        got = shown(value) if typing.get_origin(hint) is typing.Literal else type(value).__name__
        return f"must be {described(hint)}, got {got}"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    bound = BOUNDS.get(param)
    if bound is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return bound.refusal(value)
    return None


def annotations_of(fn: Callable[..., object]) -> dict[str, object]:
    """{parameter: its annotation, evaluated in `fn`'s module}; parameters without one are not checked."""
    found = {}
    for name, p in inspect.signature(fn).parameters.items():
        if p.annotation is not inspect.Parameter.empty:
            ann = p.annotation
            found[name] = eval(ann, fn.__globals__) if isinstance(ann, str) else ann
    return found


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def one_of(what: str, value: object, allowed: Sequence[str]) -> None:
    """`value` is one of the fixed `allowed` (`srpo_dsl.choices`, a registry's names), else one `UsageError`
    line, as for a device: `offload 'two': expected one of none, optimizer, params, all`."""
    if not isinstance(value, str) or value not in allowed:
        raise UsageError(f"{what} {shown(value)}: expected one of {', '.join(allowed)}")


def checked(fn: F) -> F:
    """`fn`, its arguments checked against its annotations and `BOUNDS` first: a wrong one (or a call that
    does not bind) raises `UsageError` naming it. Keeps `fn`'s name, signature, defaults and docstring."""
    signature = inspect.signature(fn)
    resolved: list[dict[str, object]] = []  # the annotations, evaluated at the first call (all names defined)

    @functools.wraps(fn)
    def call(*args: object, **kwargs: object) -> object:
        hints = resolved[0] if resolved else resolved.append(annotations_of(fn)) or resolved[0]
        try:  # the arguments given are checked first, then that none is missing
            bound = signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise UsageError(f"{fn.__name__}(): {exc}") from None
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if name in hints and kind not in (
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            ):
                why = refusal(name, value, hints[name])
                if why is not None:
                    raise UsageError(f"{fn.__name__}({name}={shown(value)}): {name} {why}")
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise UsageError(f"{fn.__name__}(): {exc}") from None
        return fn(*args, **kwargs)

    call.__checked__ = True  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]
