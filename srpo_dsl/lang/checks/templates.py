"""Static checks of role prompt templates (Jinja2 `meta`), reported at the `.srpo` position."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import jinja2
from jinja2 import meta, nodes
from jinja2.loaders import split_template_path

from srpo_dsl.lang.checks.schema import CONTEXT_VARIABLES
from srpo_dsl.lang.syntax.messages import Diagnostic, Span, did_you_mean
from srpo_dsl.lang.usercode.filestate import FileCache, FileState, look, unchanged
from srpo_dsl.template_sandbox import LIMITS, BoundedSandbox, oversized_constants

PACKAGE_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
SHUFFLE_SEED = "__shuffle_seed__"  # the context key the renderer sets for `shuffle` (no template reads it)
T = TypeVar("T")


@jinja2.pass_context
def shuffle(context: jinja2.runtime.Context, items: Iterable[T]) -> list[T]:
    """`{{ team_context | shuffle }}`: the items in an order drawn from the seed the renderer was given
    (the executor's: the run's seed, the episode and its event), so a run is reproducible and every member
    of one event sees the same order (MARTI's debate and mixture-of-agents shuffle the answers they show)."""
    out = list(items)
    random.Random(context.get(SHUFFLE_SEED, 0)).shuffle(out)
    return out


FILTERS = {"shuffle": shuffle}  # srpo-dsl's filters, on top of Jinja2's built-in ones


def template_search_path(dirs: Sequence[Path]) -> list[Path]:
    """Where role templates are looked up, by the checker and the runtime alike: the given folders
    (the workflow's folder), then the package's defaults."""
    return [*dirs, PACKAGE_TEMPLATES]


def _is_path(name: str) -> bool:
    """A name Jinja2's loader refuses: an absolute path, or one that climbs with `..`."""
    return Path(name).is_absolute() or ".." in Path(name).parts


class TemplateUnreadable(jinja2.TemplateError):
    """A template that may exist but cannot be read: the file, or a folder on its way, lacks permissions
    (not the same as "not found": the file may be the one meant)."""

    def __init__(self, name: str, path: Path, reason: str):
        super().__init__(f"cannot read {path}: {reason}")
        self.name, self.path, self.reason = name, path, reason


class TemplateLoader(jinja2.FileSystemLoader):
    """Jinja2's file loader over `template_search_path(dirs)`, which also takes a prompt given as a
    path, as data files and Python references are: absolute, or relative to the workflow's folder
    with `..` in it. Includes are looked up on the search path, as any template is. Every path it
    looks at is recorded (`filestate.look`), so a cached check knows which files it depends on."""

    def __init__(self, dirs: Sequence[Path]):
        super().__init__(template_search_path(dirs))
        self.dirs = tuple(dirs)

    def resolved(self, name: str) -> list[Path]:
        """The files a path-like `name` may mean, in order (empty for a plain template name)."""
        if not _is_path(name):
            return []
        return (
            [Path(name).resolve()] if Path(name).is_absolute() else [(d / name).resolve() for d in self.dirs]
        )

    def candidates(self, name: str) -> list[Path]:
        """Every file `name` may mean, in the order they are tried."""
        if _is_path(name):
            return self.resolved(name)
        pieces = split_template_path(name)
        return [Path(folder, *pieces) for folder in self.searchpath]

    def find(self, name: str) -> Path:
        """The first candidate that is a file: TemplateNotFound if none is, TemplateUnreadable if one
        before it cannot be looked at (it may be the one meant)."""
        for path in self.candidates(name):
            state = look(path)
            if state.error is not None:
                raise TemplateUnreadable(name, path, state.error)
            if state.is_file:
                return path
        raise jinja2.TemplateNotFound(name)

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        path = self.find(template)
        read = {path: FileState.of(path)}
        try:
            source = path.read_text(encoding=self.encoding)
        except OSError as exc:
            raise TemplateUnreadable(template, path, exc.strerror or str(exc)) from None
        return source, str(path), lambda: unchanged(read)

    def looked_in(self, name: str) -> str:
        """Where `name` was looked for, in words."""
        paths = self.resolved(name)
        if paths:
            return "looked for " + ", ".join(str(p) for p in paths)
        return f"looked in {', '.join(str(d) for d in self.dirs) or '.'} and the package defaults"


Problems = tuple[tuple[str, str, str | None], ...]  # (code, message, hint) of each
_PROBLEMS: FileCache[Problems] = FileCache(1024)  # workflows share templates; a changed one is read again


def check_template(name: str, at: Span, dirs: list[Path]) -> list[Diagnostic]:
    """Missing or unreadable template, syntax error, or a variable the runtime does not provide."""
    problems = _PROBLEMS.get((name, tuple(dirs)), lambda: _template_problems(name, tuple(dirs)))
    return [Diagnostic(code, message, at, hint) for code, message, hint in problems]


@functools.lru_cache(maxsize=256)
def _loader(env: jinja2.Environment) -> TemplateLoader:
    """The loader `_environment` gave `env`."""
    loader = env.loader
    assert isinstance(loader, TemplateLoader), "`_environment` gives its environments a TemplateLoader"
    return loader


def _environment(dirs: tuple[Path, ...]) -> BoundedSandbox:
    """The checker's environment (its loader reads the files on each call: it holds none of them)."""
    env = BoundedSandbox(loader=TemplateLoader(dirs))
    env.filters.update(FILTERS)
    return env


def _unknown_filters(tree: nodes.Template, known: Iterable[str]) -> list[tuple[str, int]]:
    """(name, line) of each filter the template applies that neither Jinja2 nor srpo-dsl defines."""
    names = set(known)
    return [(f.name, f.lineno) for f in tree.find_all(nodes.Filter) if f.name not in names]


# Nodes whose inner names stay inside (a `set` in a loop body is gone after the loop).
_SCOPES = (
    nodes.For,
    nodes.Macro,
    nodes.CallBlock,
    nodes.With,
    nodes.FilterBlock,
    nodes.Scope,
    nodes.Block,
    nodes.OverlayScope,
    nodes.ScopedEvalContextModifier,
)


class _Reads:
    """The reads of `names` where the template has not set them, on every path, before: name -> first line."""

    def __init__(self, names: set[str]):
        self.names = names
        self.unset: dict[str, int] = {}

    def walk(self, node: nodes.Node, assigned: set[str]) -> set[str]:
        """Visit `node` in the order it runs; `assigned` grows by what it sets in the current scope."""
        if isinstance(node, nodes.Name):
            if node.ctx in ("store", "param"):
                assigned.add(node.name)
            elif node.name in self.names and node.name not in assigned:
                self.unset.setdefault(node.name, node.lineno)
        elif isinstance(node, (nodes.Assign, nodes.AssignBlock)):
            value = [node.node] if isinstance(node, nodes.Assign) else node.body
            for child in [*value, node.target]:
                self.walk(child, assigned)
        elif isinstance(node, nodes.If):
            branches = [node.body, *(e.body for e in node.elif_), node.else_]
            for test in [node.test, *(e.test for e in node.elif_)]:
                self.walk(test, assigned)
            assigned |= set.intersection(*(self.walk_all(b, set(assigned)) for b in branches))
        elif isinstance(node, _SCOPES):
            self.walk_all(node.iter_child_nodes(), set(assigned))
            if isinstance(node, nodes.Macro):
                assigned.add(node.name)
        else:
            self.walk_all(node.iter_child_nodes(), assigned)
        return assigned

    def walk_all(self, children: Iterable[nodes.Node], assigned: set[str]) -> set[str]:
        for child in children:
            self.walk(child, assigned)
        return assigned


def _undefined(tree: nodes.Template) -> dict[str, int]:
    """Each variable the template reads that neither the runtime nor the template provides -> the line
    of its first such read. Jinja2's `meta` also counts a name that a `{% set %}` inside an `{% if %}`
    assigns (the branch may not run, so Jinja2 looks the name up in the context first); such a name is
    the template's own where every path to the read sets it."""
    reads = _Reads(meta.find_undeclared_variables(tree) - CONTEXT_VARIABLES)
    reads.walk(tree, set())
    return reads.unset


def _assigned_somewhere(tree: nodes.Template, name: str) -> bool:
    return any(n.name == name for n in tree.find_all(nodes.Name) if n.ctx == "store")


def _setter_included(env: BoundedSandbox, tree: nodes.Template, var: str) -> str | None:
    """The template that `tree` includes (directly or through other includes) which sets `var`, if any."""
    seen: set[str] = set()
    pending = [tree]
    while pending:
        for include in pending.pop().find_all(nodes.Include):
            name = include.template.value if isinstance(include.template, nodes.Const) else None
            if not isinstance(name, str) or name in seen:
                continue
            seen.add(name)
            try:
                included = env.parse(_loader(env).get_source(env, name)[0], name=name)
            except (jinja2.TemplateNotFound, jinja2.TemplateSyntaxError, TemplateUnreadable):
                continue  # E080 or E081 for that file
            if _assigned_somewhere(included, var):
                return name
            pending.append(included)
    return None


def _undefined_words(
    template: str, var: str, line: int, set_elsewhere: bool, setter: str | None
) -> tuple[str, str]:
    """E082's message and hint: a name nothing provides, one the template sets on some paths only, or one
    only a template it includes sets (an include does not hand its variables back)."""
    if setter is not None:
        return (
            f"template `{template}` line {line} uses `{var}`, which only `{setter}` sets: Jinja does not "
            "carry variables set inside an `{% include %}` out of it",
            f"set `{var}` in `{template}` itself, or move what reads it into `{setter}` "
            "(an included template sees the includer's variables, not the other way round)",
        )
    if set_elsewhere:
        return (
            f"template `{template}` line {line} uses `{var}`, which is not set on every path to it",
            "set it on every branch before this line (rendering is strict: an unset variable is an error)",
        )
    hint = did_you_mean(var, CONTEXT_VARIABLES) or f"available: {', '.join(sorted(CONTEXT_VARIABLES))}"
    return f"template `{template}` line {line} uses `{var}`, which no step provides", hint


Problem = tuple[str, str, str | None, int]  # (code, message, hint, line in the template) of one


def source_problems(env: BoundedSandbox, name: str, source: str) -> tuple[list[Problem], list[str]]:
    """The problems of one template's text, each at its line (a syntax error, an unknown filter, a
    variable nothing provides), and the templates it includes."""
    try:
        tree = env.parse(source, name=name)
    except jinja2.TemplateSyntaxError as exc:
        return [("E081", f"template `{name}` line {exc.lineno}: {exc.message}", None, exc.lineno or 1)], []
    found: list[Problem] = [
        ("E081", f"template `{name}` line {line}: {why}", LIMITS, line)
        for line, why in sorted(oversized_constants(tree).items())
    ]
    unknown = _unknown_filters(tree, env.filters)  # Jinja2's `meta` cannot read such a template
    for flt, line in unknown:
        hint = did_you_mean(flt, env.filters)
        found.append(("E081", f"template `{name}` line {line}: no filter named `{flt}`", hint, line))
    for var, line in [] if unknown else sorted(_undefined(tree).items()):
        setter = _setter_included(env, tree, var)
        words = _undefined_words(name, var, line, _assigned_somewhere(tree, var), setter)
        found.append(("E082", *words, line))
    return found, [t for t in meta.find_referenced_templates(tree) if t is not None]


def template_text_problems(name: str, source: str, dirs: Sequence[Path]) -> list[Problem]:
    """What the checker says of the template `name` were its text `source` (an editor's unsaved
    buffer): its own problems, and each template it includes that is missing (at the include's line)."""
    env = _environment(tuple(dirs))
    found, included = source_problems(env, name, source)
    loader = _loader(env)
    for other in included:
        try:
            loader.find(other)
        except TemplateUnreadable as exc:
            found.append(
                ("E081", f"template `{other}` cannot be read: {exc.reason}", None, _line_of(source, other))
            )
        except jinja2.TemplateNotFound:
            found.append(
                ("E080", f"template `{other}` not found", loader.looked_in(other), _line_of(source, other))
            )
    return found


def _line_of(source: str, text: str) -> int:
    """The 1-based line where `text` first appears quoted in `source` (1 if nowhere)."""
    for quote in ('"', "'"):
        at = source.find(f"{quote}{text}{quote}")
        if at >= 0:
            return source.count("\n", 0, at) + 1
    return 1


def _template_problems(name: str, dirs: tuple[Path, ...]) -> Problems:
    """(code, message, hint) for each problem of `name` and the templates it includes."""
    env = _environment(dirs)
    loader = _loader(env)
    diags: list[tuple[str, str, str | None]] = []
    seen: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        what = "template" if current == name else f"template `{current}` (included by `{name}`)"
        try:
            source = loader.get_source(env, current)[0]
        except TemplateUnreadable as exc:
            hint = f"{exc.path}: check the permissions of the file and of the folders above it"
            diags.append(("E081", f"{what} cannot be read: {exc.reason}", hint))
            continue
        except jinja2.TemplateNotFound:
            diags.append(("E080", f"{what} not found", loader.looked_in(current)))
            continue
        found, included = source_problems(env, current, source)
        diags.extend((code, message, hint) for code, message, hint, _ in found)
        pending.extend(included)
    return tuple(diags)
