"""Package exports imported on first use, so a light submodule does not pay for its heavy siblings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], object]:
    """A module-level `__getattr__` for `package`: `exports` maps each name to its submodule."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{exports[name]}"), name)

    return __getattr__
