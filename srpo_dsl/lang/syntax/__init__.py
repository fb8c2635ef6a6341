"""Syntax: a workflow's text to its typed syntax tree.

The grammar (`grammar/srpo.lark`) and the step table it takes its step keywords from (`steps`), the lexer,
the parser and its error recovery (`parser`, `syntax_errors`, `nesting`), the tree (`nodes`), and the spans,
diagnostics and errors every stage reports with (`messages`).

May import: no other room.
"""
