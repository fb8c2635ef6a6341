"""textDocument/completion: keywords, declared names, registered kinds, and the options of an open
`train with (` or `agent ... with (`."""

from __future__ import annotations

import functools
import re

from lsprotocol import types as lsp
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from srpo_dsl.lang.branches import KEEP_RULES
from srpo_dsl.lang.grammar import grammar_text
from srpo_dsl.lang.schema import POLICY_KINDS, TASK_KINDS, TOOL_KINDS, AgentOptions, TrainOptions
from srpo_dsl.registries import CONTRACTS, REWARDS

CK = lsp.CompletionItemKind
_TRAIN_OPEN = re.compile(r"\btrain\s+with\s*\(([^)]*)$")
_AGENT_OPEN = re.compile(r"(?:^|\n)[ \t]*agent\b[^\n]*\bwith\s*\(([^)]*)$")
_DECLARED = re.compile(r"^\s*(policy|tool|env|agent)\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_LITERAL = re.compile(r'"([a-z_]+)"')


@functools.cache
def keywords() -> tuple[str, ...]:
    """The grammar's keywords (the step table's included), as registered now."""
    return tuple(sorted(set(_LITERAL.findall(grammar_text()))))


def _field_detail(name: str, info: FieldInfo) -> str:
    kind = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
    default = "" if info.is_required() else f" = {info.default!r}"
    return f"{name}: {kind}{default}"


def options(model: type[BaseModel]) -> list[lsp.CompletionItem]:
    """Every option of an option block, its type and default as detail, its description as documentation."""
    return [
        lsp.CompletionItem(
            label=name,
            kind=CK.Property,
            detail=_field_detail(name, info),
            documentation=info.description or _field_detail(name, info),
            insert_text=f"{name} = ",
        )
        for name, info in model.model_fields.items()
    ]


def _registered() -> list[lsp.CompletionItem]:
    groups = [
        (CONTRACTS, "output contract"),
        (TASK_KINDS, "task kind"),
        (POLICY_KINDS, "policy kind"),
        (TOOL_KINDS, "tool kind"),
        (REWARDS, "reward function"),
    ]
    rules = [lsp.CompletionItem(label=name, kind=CK.EnumMember, detail="keep rule") for name in KEEP_RULES]
    return [
        lsp.CompletionItem(label=name, kind=CK.Function, detail=what) for reg, what in groups for name in reg
    ] + rules


def completions(text: str, line: int, character: int) -> list[lsp.CompletionItem]:
    """What may be written at (line, character): inside an open `train with (`, its options; else the rest."""
    lines = text.split("\n")
    prefix = "\n".join([*lines[:line], lines[line][:character] if line < len(lines) else ""])
    if _TRAIN_OPEN.search(prefix):
        return options(TrainOptions)
    if _AGENT_OPEN.search(prefix):
        return options(AgentOptions)
    items = [lsp.CompletionItem(label=k, kind=CK.Keyword) for k in keywords()]
    declared = dict.fromkeys(_DECLARED.findall(text))
    items += [lsp.CompletionItem(label=name, kind=CK.Variable, detail=kind) for kind, name in declared]
    return items + _registered()
