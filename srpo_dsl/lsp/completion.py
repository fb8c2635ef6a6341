"""textDocument/completion by position: the keywords the grammar accepts at the cursor and, where it
accepts a name, the names that fit the clause (agents after a step keyword, `on` and `by`; policies
after `uses`; contracts after `emits`; an option's values after its `=`; ...). Nothing in a comment
or a string."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lsprotocol import types as lsp
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from srpo_dsl.choices import FINISH, FINISH_REASONS
from srpo_dsl.lang.checks.branches import KEEP_RULES
from srpo_dsl.lang.checks.schema import (
    POLICY_KINDS,
    TASK_KINDS,
    TOOL_KINDS,
    AgentOptions,
    Generation,
    LoraOptions,
    TrainOptions,
    option_choices,
)
from srpo_dsl.lang.syntax.grammar import lark_parser, statements
from srpo_dsl.lsp.expected import Expected, expected, in_comment_or_string
from srpo_dsl.registries import CONTRACTS, REWARDS

CK = lsp.CompletionItemKind
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DECLARED = re.compile(
    r"^[ \t]*(policy|tool|env|agent)[ \t]+([A-Za-z_][A-Za-z0-9_]*)(?:[ \t]*\[[ \t]*([0-9]+))?([^\n]*)",
    re.MULTILINE,
)
_CONTRACT_ARGS = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(([^)]*)\)")
_WITH = {"TRAIN": TrainOptions, "AGENT": AgentOptions, "POLICY": Generation}
_KINDS = {"POLICY": POLICY_KINDS, "TASK": TASK_KINDS, "TOOL": TOOL_KINDS}


@dataclass(frozen=True)
class Declared:
    """A name the file declares: its kind (`agent`, `policy`, `tool`, `env`), its pool size (agents
    written `[N]`), and the words its `emits` lists (`verdict(approve, reject)`, `act(search, answer)`)."""

    kind: str
    name: str
    pool: int | None
    words: tuple[str, ...]


def declared(text: str) -> list[Declared]:
    """Every declaration of `text`, read line by line (a file with syntax errors has them too)."""
    out = []
    for kind, name, pool, rest in _DECLARED.findall(text):
        emits = rest.partition("emits")[2]
        words = [
            w.strip()
            for contract, args in _CONTRACT_ARGS.findall(emits)
            if contract in CONTRACTS and (CONTRACTS[contract].testable or CONTRACTS[contract].acts)
            for w in args.split(",")
        ]
        out.append(Declared(kind, name, int(pool) if pool else None, tuple(w for w in words if w)))
    return out


def field_detail(name: str, info: FieldInfo) -> str:
    kind = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
    default = "" if info.is_required() else f" = {info.default!r}"
    return f"{name}: {kind}{default}"


def options(model: type[BaseModel]) -> list[lsp.CompletionItem]:
    """Every option of an option block, its type and default as detail, its description as documentation."""
    return [
        lsp.CompletionItem(
            label=name,
            kind=CK.Property,
            detail=field_detail(name, info),
            documentation=info.description or field_detail(name, info),
            insert_text=f"{name} = ",
        )
        for name, info in model.model_fields.items()
    ]


def _value(word: str) -> str:
    """A value as written: a bare word, or a string where it is not a name (`"event-mean"`)."""
    return word if _IDENT.fullmatch(word) else f'"{word}"'


def _items(names: Iterable[str], kind: lsp.CompletionItemKind, detail: str) -> list[lsp.CompletionItem]:
    return [lsp.CompletionItem(label=_value(n), kind=kind, detail=detail) for n in names]


def _declared_items(decls: list[Declared], *kinds: str) -> list[lsp.CompletionItem]:
    return [
        lsp.CompletionItem(
            label=d.name,
            kind=CK.Variable,
            detail=f"{d.kind} (pool of {d.pool})" if d.pool else d.kind,
        )
        for d in decls
        if d.kind in kinds
    ]


def _contracts() -> list[lsp.CompletionItem]:
    return [
        lsp.CompletionItem(
            label=name, kind=CK.Function, detail="output contract", documentation=spec.describe
        )
        for name, spec in CONTRACTS.items()
    ]


def _option_model(exp: Expected) -> type[BaseModel] | None:
    """The option model of the `(` left open before the cursor: `with (`, `lora(`, or a kind's call."""
    at = exp.opener()
    if not at:
        return None
    before, head = exp.tokens[at - 1], exp.head()
    if before.type == "LORA":
        return LoraOptions
    if before.type == "WITH":
        return _WITH.get(head or "")
    kinds: Mapping = _KINDS.get(head or "", {})
    return kinds[before.value].options if before.type == "NAME" and before.value in kinds else None


def _in_parens(exp: Expected, decls: list[Declared]) -> list[lsp.CompletionItem]:
    """A name after `(` or `,` inside parentheses: an option's name, an agent of `reward FN(`, a pool
    of `route(`."""
    at = exp.opener()
    model = _option_model(exp)
    if model is not None:
        return options(model)
    if at and exp.head() == "REWARD" and exp.last == "LPAR":
        return _declared_items(decls, "agent")
    before = exp.tokens[at - 1] if at else None
    if before is not None and before.value in CONTRACTS and CONTRACTS[before.value].selects:
        return _declared_items([d for d in decls if d.pool], "agent")
    return []


def _after_equal(exp: Expected) -> list[lsp.CompletionItem]:
    """After `policy NAME =`, `tool NAME =`: the kinds; after an option's `=`: its values."""
    name = exp.tokens[-2] if len(exp.tokens) > 1 else None
    if len(exp.tokens) > 2 and exp.tokens[-3].type in _KINDS:
        return _items(_KINDS[exp.tokens[-3].type], CK.Function, f"{exp.tokens[-3].value} kind")
    model = _option_model(exp)
    if model is None or name is None:
        return []
    return _items(option_choices(model, name.value), CK.EnumMember, f"{name.value} value")


def _after_compare(exp: Expected, decls: list[Declared]) -> list[lsp.CompletionItem]:
    subject = exp.tokens[-2].value if len(exp.tokens) > 1 else ""
    if len(exp.tokens) > 2 and exp.tokens[-3].type == "DOT":  # `solver.finish ==`
        return _items(FINISH_REASONS, CK.EnumMember, "how a turn ended")
    words = [w for d in decls if d.name == subject for w in d.words]
    return _items(dict.fromkeys(words), CK.EnumMember, f"a word {subject} says")


_AFTER: dict[str, tuple[str, ...]] = {  # the keyword before a name -> the kinds of names declared
    "USES": ("policy",),
    "CALL": ("tool",),
    "ON": ("agent",),
    "STEP": ("env",),
    "IF": ("agent", "env"),
    "UNTIL": ("agent", "env"),
}


def names(exp: Expected, decls: list[Declared]) -> list[lsp.CompletionItem]:
    """The names that fit where the parser takes a name, by the word before the cursor."""
    last, step_kinds = exp.last or "", statements(lark_parser()).step_kinds
    if last in _AFTER:
        return _declared_items(decls, *_AFTER[last])
    if last in step_kinds:
        return _declared_items(decls, "agent")
    if last == "BY":
        branch = any(t.type == "BRANCH" for t in exp.statement())
        return (
            _items(REWARDS, CK.Function, "reward function")
            if branch
            else _declared_items(decls, "agent", "env")
        )
    if last == "REWARD":
        return _items(REWARDS, CK.Function, "reward function") + _declared_items(decls, "env")
    if last == "KEEP":
        return _items(KEEP_RULES, CK.EnumMember, "keep rule")
    if last == "TASK" and exp.head() == "TASK":
        return _items(TASK_KINDS, CK.Function, "task kind")
    if last == "EQUAL":
        return _after_equal(exp)
    if last == "COMPARE":
        return _after_compare(exp, decls)
    if last == "DOT" and len(exp.tokens) > 2 and exp.tokens[-3].type in ("IF", "UNTIL"):  # `if solver.`
        return _items((FINISH,), CK.Field, "how the agent's last turn ended")
    if last == "EMITS" or (last == "COMMA" and exp.head() == "ENV" and exp.opener() is None):
        return _contracts()
    if last in ("LPAR", "COMMA") and exp.opener() is not None:
        return _in_parens(exp, decls)
    if last == "COMMA" and (exp.list_opener() == "ON" or exp.list_opener() in step_kinds):
        return _declared_items(decls, "agent")  # `step e on a, `, `parallel a, `
    return []


_NO_KEYWORDS = frozenset({"EMITS", "EQUAL"})  # a contract or a value here, never a keyword


def keywords(exp: Expected) -> list[lsp.CompletionItem]:
    """The keywords the parser takes next (`by`, `only`, `branch` after `parallel solver`; every
    statement's keyword where one may start)."""
    if exp.last in _NO_KEYWORDS or (exp.last == "COMMA" and exp.head() == "ENV"):
        return []
    parser = lark_parser()
    accepts, spelled = exp.accepts - {"$END"}, statements(parser).value_words
    if spelled <= accepts:  # a value (`hf(`, `f(x, `): its word may spell any keyword, none is one here
        accepts -= spelled
    words = []
    for term in sorted(accepts):
        pattern = parser.get_terminal(term).pattern
        if pattern.type == "str" and _IDENT.fullmatch(pattern.value):
            words.append(pattern.value)
    return [lsp.CompletionItem(label=w, kind=CK.Keyword) for w in sorted(words)]


def completions(text: str, line: int, character: int) -> list[lsp.CompletionItem]:
    """What may be written at (line, character): nothing in a comment or a string, else the keywords the
    grammar accepts there and, where it accepts a name, the names that fit."""
    lines = text.split("\n")
    current = lines[line][:character] if line < len(lines) else ""
    if in_comment_or_string(current):
        return []
    exp = expected("\n".join([*lines[:line], current]))
    if exp is None:
        return []
    found = names(exp, declared(text)) if "NAME" in exp.accepts else []
    return found + keywords(exp)
