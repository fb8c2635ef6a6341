"""State keys: what an environment may return last, and the warning of `advantage = state` without one.

An environment's step returns `(observations, done)`, `(observations, done, reward)` or, with a state
key, `(observations, done, reward, key)`; one that selects replicas (`emits route(POOL)`) returns
`(observations, done, reward, selection)` or `(observations, done, reward, selection, key)`. The key
(a str) names the state its observations show; `advantage = state` groups steps by it (GiGPO's anchor
states, docs/objective.md). Whether an environment can return one is read from its function's
`return` statements with `ast`, never by running it: W008 when `advantage = state` is set and no
environment of the workflow can.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from srpo_dsl.lang.checks.declarations import EnvInfo
from srpo_dsl.lang.usercode.pycode import read_module, top_level
from srpo_dsl.lang.usercode.pysource import RefProblem

if TYPE_CHECKING:
    from srpo_dsl.lang.checks.check_context import CheckContext

STATE_ESTIMATOR = "state"  # the advantage estimator that groups steps by state key


def return_lengths(selects: bool) -> tuple[int, ...]:
    """The lengths of the tuple an environment's step returns; the last one ends with a state key."""
    return (4, 5) if selects else (2, 3, 4)


def _returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Return]:
    """The function's own `return` statements (not those of functions or classes inside it)."""
    found: list[ast.Return] = []
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def may_return_key(info: EnvInfo) -> bool:
    """Whether the environment's function may return a state key: False only when every `return` of its
    `def` is a tuple written out whose length has no key, or whose key is `None`; True when its code
    cannot be read that far (a name bound otherwise, a return of a variable)."""
    code = info.code
    if code is None:
        return False
    try:
        found = top_level(read_module(Path(code.file))).defs.get(code.function)
    except RefProblem:
        return True
    if found is None:
        return True
    keyed = return_lengths(bool(info.selects))[-1]
    for ret in _returns(found[0]):
        value = ret.value
        if not isinstance(value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in value.elts):
            return True
        last = value.elts[-1] if value.elts else None
        if len(value.elts) == keyed and not (isinstance(last, ast.Constant) and last.value is None):
            return True
    return False


def warn_no_state_key(ctx: CheckContext) -> None:
    """`advantage = state` in the train block, but no environment can return a state key (W008): every
    step then groups with its (prompt, event type), as `event` groups it, plus the episode's advantage."""
    train = ctx.out.train
    if train is None or train.advantage != STATE_ESTIMATOR or not ctx.program.trains:
        return
    if any(may_return_key(info) for info in ctx.out.envs.values()):
        return
    option = next(o for o in ctx.program.trains[0].options if o.name == "advantage")
    what = "no environment of this workflow returns one" if ctx.program.envs else "it has no environment"
    ctx.warn(
        "W008",
        f"`advantage = {STATE_ESTIMATOR}` groups steps by the state key an environment returns, but {what}: "
        "every step falls back to its (prompt, event type) group",
        option.span,
        "an environment returns the key last: `return observations, done, reward, key` "
        "(e.g. the position as text)",
    )
