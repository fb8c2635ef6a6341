"""editors/neovim/syntax/srpo.vim is the one generated from the Lark grammar (`srpo_dsl.lang.tooling.vimsyntax`,
with the TextMate grammar's keyword lists), and every keyword of the language is in it. Neovim reading
its groups at positions: tests/editors/test_neovim.py."""

from __future__ import annotations

import re
from pathlib import Path

from srpo_dsl.lang import STEP_KINDS, Shape, StepKind, register_step
from srpo_dsl.lang.tooling.textmate import keywords
from srpo_dsl.lang.tooling.vimsyntax import LINKS, main, render

ROOT = Path(__file__).resolve().parents[2]
NVIM = ROOT / "editors" / "neovim"
SYNTAX = NVIM / "syntax" / "srpo.vim"
REGENERATE = "python -m srpo_dsl.lang.tooling.vimsyntax editors/neovim/syntax/srpo.vim"


def keyword_lines(text: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("syntax keyword "):
            group, *words = line.split()[2:]
            found.setdefault(group, set()).update(words)
    return found


def test_the_shipped_syntax_file_is_the_generated_one() -> None:
    assert SYNTAX.read_text(encoding="utf-8") == render(), f"regenerate it: {REGENERATE}"


def test_main_writes_the_file(tmp_path) -> None:
    out = tmp_path / "srpo.vim"
    assert main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
    assert main([]) == 2


def test_every_keyword_is_a_vim_keyword_once() -> None:
    found = keyword_lines(render())
    words = [w for group in found.values() for w in group]
    assert sorted(words) == sorted(keywords().keywords)
    assert found["srpoStep"] == set(keywords().steps) == set(STEP_KINDS)
    assert found["srpoConstant"] == {"true", "false", "frozen"} and found["srpoTask"] == {"task"}


def test_every_group_is_linked_and_every_link_is_used() -> None:
    text = render()
    used = set(re.findall(r"^syntax \w+ (srpo\w+)", text, re.M))
    assert used == {group for group, _ in LINKS}
    for group, std in LINKS:
        assert f"highlight default link {group} {std}\n" in text
    assert text.rstrip().endswith('let b:current_syntax = "srpo"')


def test_a_registered_step_kind_is_a_step_keyword_of_the_syntax_file() -> None:
    register_step(StepKind("wobble", frozenset({"singleton"}), None, ("feedback",), Shape("[", "]", "box")))
    try:
        assert "wobble" in keyword_lines(render())["srpoStep"]
    finally:
        del STEP_KINDS["wobble"]
    assert "wobble" not in render()


def test_the_ftdetect_file_gives_srpo_files_their_filetype() -> None:
    text = (NVIM / "ftdetect" / "srpo.vim").read_text(encoding="utf-8")
    assert "autocmd BufRead,BufNewFile *.srpo setfiletype srpo" in text
