"""How many columns text takes on screen, for `srpo-dsl fmt`'s alignment (wcwidth's rules, in short).

A monospace font gives East Asian wide and fullwidth characters (CJK, most emoji) two columns and
combining marks and zero-width format characters (an accent written apart, a variation selector,
the zero-width joiner) none; every other character takes one. Names are ASCII; strings and comments
may hold anything.
"""

from __future__ import annotations

import unicodedata

_ZERO = frozenset({"Mn", "Me", "Cf"})
_WIDE = frozenset({"W", "F"})


def _columns(char: str) -> int:
    if unicodedata.category(char) in _ZERO:
        return 0
    return 2 if unicodedata.east_asian_width(char) in _WIDE else 1


def display_width(text: str) -> int:
    """The columns `text` takes in a monospace font."""
    return len(text) if text.isascii() else sum(_columns(c) for c in text)


def pad(text: str, width: int) -> str:
    """`text` and spaces up to `width` columns (as `str.ljust`, counting columns, not characters)."""
    return text + " " * (width - display_width(text))
