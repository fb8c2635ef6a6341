"""`srpo_dsl.lang` is in stage rooms: each module of the language sits in one room (a sub-package) and imports
only its own room and the rooms below it (ROOMS); each room's docstring and docs/architecture.md say the same.
Every import counts, one inside a function or under TYPE_CHECKING too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

LANG = Path(__file__).resolve().parents[2] / "srpo_dsl" / "lang"
ROOMS = {  # room -> the other rooms it may import
    "syntax": (),  # text -> typed syntax tree; spans, diagnostics, the step table
    "usercode": ("syntax",),  # the user's Python, read with `ast`; the files a check read
    "checks": ("syntax", "usercode"),  # syntax tree -> `Checked`; the option schema
    "compile": ("syntax", "usercode", "checks"),  # `Checked` -> event graph; its formats; settings
    "tooling": ("syntax",),  # outside the compiler: the formatter, the editor grammars
}
FRONT = {"__init__", "analysis"}  # `srpo_dsl.lang` itself: the front door and the pipeline over the rooms


def lang_imports(path: Path) -> set[str]:
    """The `srpo_dsl.lang...` modules a file imports (`from srpo_dsl.lang.syntax import nodes` -> the
    package `srpo_dsl.lang.syntax`, whose room is `syntax`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {m for m in found if m == "srpo_dsl.lang" or m.startswith("srpo_dsl.lang.")}


def room_of(module: str) -> str:
    """`srpo_dsl.lang.checks.schema` -> `checks`; `srpo_dsl.lang` and `srpo_dsl.lang.analysis` -> `front`."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 or (len(parts) == 3 and parts[2] in ROOMS) else "front"


def test_every_module_of_the_language_is_in_a_room_or_the_front() -> None:
    loose = {p.stem for p in LANG.glob("*.py")}
    assert loose == FRONT
    assert {p.parent.name for p in LANG.glob("*/__init__.py")} == set(ROOMS)
    assert not list(LANG.glob("*/*/*.py")), "a room holds modules, not rooms"


def test_no_room_imports_a_room_it_may_not() -> None:
    bad = []
    for path in sorted(LANG.glob("*/*.py")):
        room = path.parent.name
        allowed = {room, *ROOMS[room]}
        bad += [f"{room}/{path.name} imports {m}" for m in lang_imports(path) if room_of(m) not in allowed]
    assert bad == []
    # the test sees the imports between rooms
    assert "srpo_dsl.lang.syntax" in lang_imports(LANG / "checks" / "checker.py")


def test_each_room_s_docstring_says_what_it_may_import() -> None:
    for room, allowed in ROOMS.items():
        doc = ast.get_docstring(ast.parse((LANG / room / "__init__.py").read_text(encoding="utf-8")))
        line = next((ln for ln in (doc or "").splitlines() if ln.startswith("May import:")), "")
        assert tuple(re.findall(r"`(\w+)`", line)) == allowed and line, (room, line)


def test_the_architecture_page_states_the_rooms() -> None:
    """docs/architecture.md's table of rooms: `| `room` | `may`, `import` | job |`, the rooms in ROOMS' order."""
    text = (LANG.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|", text, flags=re.MULTILINE)
    stated = {room: tuple(re.findall(r"`(\w+)`", may)) for room, may in rows if room in ROOMS}
    assert list(stated.items()) == list(ROOMS.items())
