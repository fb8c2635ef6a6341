"""Named entries: the one mechanism behind every registry of the package (`srpo_dsl.registries`
lists the registries whose built-ins live in heavy modules; `srpo_dsl.lang.schema` the language's).

An entry is an object, or the import path `"package.module:attribute"` of one: a registry read by
code that must stay light (`srpo-dsl validate` imports no torch) holds its built-in entries by
path, and a lookup imports the entry's module the first time. Names are known without importing
anything. Plugins add entries with `add` or the `register` decorator; a name is registered once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any, TypeVar

T = TypeVar("T")


def load(path: str) -> Any:
    """The object at `"package.module:attribute"`, its module imported."""
    module, sep, attribute = path.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"an import path is 'package.module:attribute', got {path!r}")
    return getattr(import_module(module), attribute)


@dataclass(frozen=True)
class _ByPath:
    """An entry not imported yet."""

    path: str


class Registry(MutableMapping[str, T]):
    """`what`'s entries by name, in registration order (built-ins first).

    `builtins` maps names to import paths, imported at the first lookup of each. Reading the
    names (`in`, iteration, `len`) imports nothing; `lookup` of an unknown name is a ValueError
    that lists the known ones. `add` and `register` refuse a name twice; item assignment
    replaces an entry on purpose (a test standing in for a built-in).
    """

    def __init__(self, what: str, builtins: Mapping[str, str] | None = None):
        self.what = what
        self._entries: dict[str, T | _ByPath] = {n: _ByPath(p) for n, p in (builtins or {}).items()}

    def __getitem__(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, _ByPath):
            entry = self._entries[name] = load(entry.path)
        return entry

    def __setitem__(self, name: str, entry: T) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def add(self, name: str, entry: T) -> None:
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._entries[name] = entry

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that registers what it decorates as `name`."""

        def register(entry: T) -> T:
            self.add(name, entry)
            return entry

        return register

    def lookup(self, name: str) -> T:
        if name not in self._entries:
            raise ValueError(f"unknown {self.what} {name!r}; known: {', '.join(self)}")
        return self[name]
