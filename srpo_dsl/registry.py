"""Named entries filled by a decorator: the one mechanism behind every registry of the package."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Registry(dict[str, T]):
    """`what`'s entries by name; `lookup` of an unknown name is a ValueError listing the known ones."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def add(self, name: str, entry: T) -> None:
        if name in self:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self[name] = entry

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that registers its function as `name`."""

        def register(entry: T) -> T:
            self.add(name, entry)
            return entry

        return register

    def lookup(self, name: str) -> T:
        if name not in self:
            raise ValueError(f"unknown {self.what} {name!r}; known: {', '.join(self)}")
        return self[name]
