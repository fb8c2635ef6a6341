"""Tooling outside the compiler: the formatter of `srpo-dsl fmt` (`format`, `layout`, `width`) and the
editor grammars generated from the Lark grammar (`textmate`, `vimsyntax`, `treesitter`, `generated`).

May import: `syntax`.
"""
