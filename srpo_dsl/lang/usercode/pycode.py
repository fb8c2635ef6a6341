"""The user's Python, as a workflow names it, read with `ast` only: never imported, never run.

A reference is `"path/to/file.py:function"` (relative to the workflow's folder) or
`"package.module:function"` (a module found on `sys.path`, located without importing its
packages: `pysource`). `locate_ref` finds the file and the function's `def`; `Params` is the function's
signature, read from the `ast` here and from `inspect` at run time, so both apply one rule
(`Params.problem`) to the call srpo-dsl will make (`USES`).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from srpo_dsl.lang.usercode.pysource import RefProblem, source_of

UseName = Literal["reward", "scorer", "loader", "tool", "env", "parser", "objective", "advantage"]
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Use:
    """What a workflow calls user code for, and how it calls it."""

    shape: str  # the call, as the docs and messages show it
    positional: int  # positional arguments passed (one more for a function that takes `optional`)
    keywords: tuple[str, ...] = ()  # keywords always passed (besides the binding's own options)
    optional: str | None = None  # one more positional argument, passed when the function takes it

    def arity(self, params: Params) -> int:
        """The positional arguments passed to a function with these parameters (`Params.takes`)."""
        if self.optional is None:
            return self.positional
        return self.positional + params.takes(self.positional, self.optional)


USES: dict[str, Use] = {
    "reward": Use("reward(answer, row[, episode]) -> float or {role: float}", 2, optional="episode"),
    "scorer": Use("scorer(answer, row[, episode]) -> float", 2, optional="episode"),  # `branch N by "f:fn"`
    "loader": Use("loader(split, **options) -> list of dict rows", 0, ("split",)),
    "tool": Use("tool(queries, **options) -> list of str, one per query", 1),
    "env": Use("env(outputs, row, state, **options) -> (observations, done[, reward[, key]])", 3),
    "parser": Use("parser(text[, finish]) -> (valid, value)", 1, optional="finish"),
    "objective": Use("objective(batch: PolicyBatch, config: LossConfig) -> PolicyTerms", 2),
    "advantage": Use("advantage(inputs: AdvantageInputs, eps: float) -> Tensor [N]", 2),
}
TOOL_OPTIONS = ("timeout", "batch")  # a Python tool's options that srpo-dsl keeps (the rest are passed on)
ENV_OPTIONS = ("timeout",)  # an environment's options that srpo-dsl keeps (the rest are passed on)


@dataclass(frozen=True)
class Params:
    """A function's parameters: enough to tell whether a call binds, without calling it."""

    positional: tuple[str, ...]  # positional-only first, then positional-or-keyword
    posonly: int
    defaults: int  # trailing positional parameters with a default
    varargs: bool
    keyword_only: tuple[str, ...]
    required_keywords: tuple[str, ...]  # keyword-only without a default
    varkw: bool

    @classmethod
    def of_ast(cls, fn: ast.FunctionDef) -> Params:
        a = fn.args
        kw_required = tuple(k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None)
        return cls(
            tuple(x.arg for x in [*a.posonlyargs, *a.args]),
            len(a.posonlyargs),
            len(a.defaults),
            a.vararg is not None,
            tuple(k.arg for k in a.kwonlyargs),
            kw_required,
            a.kwarg is not None,
        )

    @classmethod
    def of_callable(cls, fn: Callable[..., object]) -> Params:
        ps = list(inspect.signature(fn).parameters.values())
        kind = inspect.Parameter
        positional = [p for p in ps if p.kind in (kind.POSITIONAL_ONLY, kind.POSITIONAL_OR_KEYWORD)]
        kwonly = [p for p in ps if p.kind is kind.KEYWORD_ONLY]
        return cls(
            tuple(p.name for p in positional),
            sum(p.kind is kind.POSITIONAL_ONLY for p in ps),
            sum(p.default is not kind.empty for p in positional),
            any(p.kind is kind.VAR_POSITIONAL for p in ps),
            tuple(p.name for p in kwonly),
            tuple(p.name for p in kwonly if p.default is kind.empty),
            any(p.kind is kind.VAR_KEYWORD for p in ps),
        )

    @property
    def required(self) -> int:
        return len(self.positional) - self.defaults

    def takes(self, index: int, name: str) -> bool:
        """Whether the optional argument at `index` is passed: its parameter is required or named `name`."""
        param = self.positional[index : index + 1]
        return bool(param) and (self.required > index or param[0] == name)

    def problem(self, npos: int, keywords: tuple[str, ...]) -> str | None:
        """Why a call with `npos` positional arguments and these keywords would not bind; None if it does."""
        if npos > len(self.positional) and not self.varargs:
            return f"it takes {len(self.positional)} positional argument(s), srpo-dsl passes {npos}"
        taken = set(self.positional[:npos])
        named = set(self.positional[self.posonly :]) | set(self.keyword_only)
        for key in keywords:
            if key in taken:
                return f"argument `{key}` would be given twice"
            if key not in named and not self.varkw:
                return f"it has no parameter `{key}` (and no **kwargs)"
        given = taken | set(keywords)
        missing = [p for p in self.positional[: self.required] if p not in given]
        missing += [k for k in self.required_keywords if k not in given]
        if missing:
            return f"its parameter(s) {', '.join(f'`{m}`' for m in missing)} would get no value"
        return None


def call_problem(use: UseName, params: Params, options: tuple[str, ...]) -> str | None:
    """Why srpo-dsl's call of a `use` function with these binding options would fail; None if it binds."""
    spec = USES[use]
    return params.problem(spec.arity(params), spec.keywords + options)


@dataclass(frozen=True)
class CodeRef:
    """A located reference: the function `function` defined at `line` of `file`."""

    use: UseName
    text: str  # as written in the workflow
    file: str  # the module's source file (relative paths as the workflow's own path is given)
    module: str | None  # `package.module` for the second form; None for a file path
    function: str
    line: int
    arity: int  # positional arguments passed (a reward, a scorer: 2, or 3 with the episode)

    def attrs(self) -> dict[str, object]:
        return {
            "use": self.use,
            "ref": self.text,
            "file": self.file,
            "module": self.module,
            "function": self.function,
            "line": self.line,
            "call": USES[self.use].shape,
        }


def is_reference(value: object) -> bool:
    """Whether an option's value names Python code (`"file.py:function"`), not a registered name."""
    return isinstance(value, str) and ":" in value


def split_ref(text: str) -> tuple[str, str]:
    """(`file.py` or `package.module`, function) of a reference; RefProblem if malformed."""
    where, sep, function = text.rpartition(":")
    if not sep or not where:
        raise RefProblem(
            "E090",
            f"`{text}` is not a Python reference",
            'write "file.py:function" (relative to the workflow) or "package.module:function"',
        )
    if not _IDENT.fullmatch(function):
        raise RefProblem("E090", f"`{function}` is not a Python function name")
    if not where.endswith(".py") and not _MODULE.fullmatch(where):
        raise RefProblem("E090", f"`{where}` is neither a .py file nor a dotted module name")
    return where, function


@dataclass(frozen=True)
class TopLevel:
    """What a module binds at top level: `def`s with their parameters, and other names (line each)."""

    defs: dict[str, tuple[ast.FunctionDef | ast.AsyncFunctionDef, int]]
    others: dict[str, tuple[str, int]]  # name -> (how it is bound: "class", "assignment", "import"), line


def top_level(tree: ast.Module) -> TopLevel:
    """Names bound by the module's own statements (inside top-level `if`/`try`/`with` too); the last wins."""
    defs: dict[str, tuple[ast.FunctionDef | ast.AsyncFunctionDef, int]] = {}
    others: dict[str, tuple[str, int]] = {}

    def bind(name: str, node: ast.stmt, how: str) -> None:
        """The statement `node` binds `name` (`how`: def, class, assignment or import)."""
        defs.pop(name, None)
        others.pop(name, None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs[name] = (node, node.lineno)
        else:
            others[name] = (how, node.lineno)

    def visit(body: list[ast.stmt]) -> None:
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bind(st.name, st, "def")
            elif isinstance(st, ast.ClassDef):
                bind(st.name, st, "class")
            elif isinstance(st, (ast.Import, ast.ImportFrom)):
                for alias in st.names:
                    bind((alias.asname or alias.name).split(".")[0], st, "import")
            elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                for t in targets:
                    for node in ast.walk(t):
                        if isinstance(node, ast.Name):
                            bind(node.id, st, "assignment")
            for block in ("body", "orelse", "finalbody"):
                if isinstance(st, (ast.If, ast.Try, ast.With)) and hasattr(st, block):
                    visit(getattr(st, block))
            if isinstance(st, ast.Try):
                for handler in st.handlers:
                    visit(handler.body)

    visit(tree.body)
    return TopLevel(defs, others)


def read_module(path: Path) -> ast.Module:
    """The module's syntax tree; RefProblem (E092) if it cannot be read or parsed."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RefProblem("E092", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return ast.parse(source, str(path))
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}:{exc.offset}"
        raise RefProblem("E092", f"{where}: Python syntax error: {exc.msg}") from None


@dataclass(frozen=True)
class Located:
    ref: CodeRef
    warning: str | None  # the signature could not be checked (a class, an assignment, an import)


def locate_ref(text: str, use: UseName, base: Path, options: tuple[str, ...] = ()) -> Located:
    """Check a reference without running anything: the file, a top-level def, a signature that binds."""
    from srpo_dsl.lang.syntax.messages import did_you_mean

    where, function = split_ref(text)
    path, module = source_of(where, base)
    found = top_level(read_module(path))
    shown = f"{path}"
    if function in found.others:
        how, line = found.others[function]
        warning = f"`{function}` in {shown}:{line} is bound by {how}, so its signature is not checked"
        return Located(CodeRef(use, text, shown, module, function, line, USES[use].positional), warning)
    if function not in found.defs:
        names = sorted(found.defs)
        raise RefProblem(
            "E093",
            f"{shown} defines no top-level function `{function}`",
            did_you_mean(function, names) or (f"functions there: {', '.join(names)}" if names else None),
        )
    node, line = found.defs[function]
    if isinstance(node, ast.AsyncFunctionDef):
        raise RefProblem("E094", f"`{function}` ({shown}:{line}) is `async`; srpo-dsl calls it synchronously")
    params = Params.of_ast(node)
    problem = call_problem(use, params, options)
    if problem:
        raise RefProblem(
            "E094",
            f"`{function}` ({shown}:{line}) cannot be called as {USES[use].shape}: {problem}",
        )
    return Located(CodeRef(use, text, shown, module, function, line, USES[use].arity(params)), None)
