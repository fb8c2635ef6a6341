"""Branching steps (`act A branch N [cross] [keep RULE] [by SCORER]`): their checks and their static cost.

A branch samples N alternatives of one event from the same pre-action state. With no `keep`, every
alternative continues (the episode becomes a tree: everything after the step runs once per
alternative); with `keep RULE`, one alternative continues and the others end at once, each credited
with its score, so a pruning branch needs a scorer (`by ...`). The return of an alternative that
continues is backed up from its subtree (`train with (backup = mean|max, discount = ...)`).

`branch N cross` on a step of several agents (`act a, b branch 2 cross`): each agent samples N
alternatives of its own part, and every joint combination (N^agents, one sample of each agent) is an
alternative of the step: scored, kept or continued as above. Each agent's sample is an event of its own,
whose return is the mean of the returns of the joints it takes part in (CoMLRL's cross joint mode).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from srpo_dsl.lang.checks.declarations import BranchInfo
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Diagnostic, did_you_mean
from srpo_dsl.lang.usercode.pycode import CodeRef
from srpo_dsl.registries import REWARDS

# How a pruning branch picks the alternative that continues, from each alternative's score (None: none),
# whether all its members are valid, and a seed: (scores, valid, seed) -> the index kept.
KeepRule = Callable[[Sequence["float | None"], Sequence[bool], int], int]


def _best(scores: Sequence[float | None], valid: Sequence[bool], seed: int) -> int:
    """The highest score; ties: the first."""
    best = max(s for s in scores if s is not None)
    return next(i for i, s in enumerate(scores) if s == best)


def _random(scores: Sequence[float | None], valid: Sequence[bool], seed: int) -> int:
    """A seeded random one (the run's seed, the episode and the step: reproducible)."""
    return random.Random(seed).randrange(len(scores))


def _first(scores: Sequence[float | None], valid: Sequence[bool], seed: int) -> int:
    """The first whose members are all valid; none valid: the first."""
    return next((i for i, ok in enumerate(valid) if ok), 0)


KEEP_RULES: dict[str, KeepRule] = {"best": _best, "random": _random, "first": _first}

# How a tree branch's value combines its alternatives' returns (`train with (backup = ...)`).
BACKUPS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": lambda values: sum(values) / len(values),
    "max": max,
}

# The most paths (leaves) one episode may branch into: each path is a whole rollout of the rest of the
# workflow, so beyond this the cost of one episode is a typo, not a plan.
MAX_PATHS = 1024

# The most joint combinations one `branch N cross` step may make (N^agents): each is an alternative the
# step's scorer scores and, in a tree, a path of its own; beyond this the pairing is a typo, not a plan.
MAX_JOINTS = 64

Report = Callable[[Diagnostic], None]
LocateCode = Callable[[n.Ref], "CodeRef | None"]


def check_branch(
    branch: n.Branch, agents: Sequence[str], report: Report, locate: LocateCode
) -> BranchInfo | None:
    """The branch clause of a step of `agents` resolved, or None after reporting why not (E056, E057,
    E028, E029, E09x, E105, E106)."""
    ok = _cross_ok(branch, agents, report)
    if branch.count < 2:
        report(
            Diagnostic(
                "E056",
                f"a branch samples at least 2 alternatives, not {branch.count}",
                branch.count_span,
                "drop `branch` to sample the step once",
            )
        )
        ok = False
    keep = branch.keep.name if branch.keep else None
    if branch.keep is not None and keep not in KEEP_RULES:
        hint = did_you_mean(branch.keep.name, KEEP_RULES) or f"known: {', '.join(KEEP_RULES)}"
        report(Diagnostic("E057", f"unknown keep rule `{keep}`", branch.keep.span, hint))
        ok = False
    if branch.keep is not None and branch.scorer is None:
        report(
            Diagnostic(
                "E057",
                "a pruned alternative ends here, so its return is its score: `keep` needs `by SCORER`",
                branch.span,
                f"e.g. `branch {branch.count} keep {keep} by exact_match(task.answer)`; no `keep`: a tree",
            )
        )
        ok = False
    scorer = _scorer(branch.scorer, report, locate) if branch.scorer else (None, None, None)
    if not ok or (branch.scorer is not None and scorer[0] is None):
        return None
    return BranchInfo(branch.count, keep, *scorer, cross=tuple(agents) if branch.cross else ())


def _cross_ok(branch: n.Branch, agents: Sequence[str], report: Report) -> bool:
    """`cross` pairs the samples of two or more agents (E105), into at most `MAX_JOINTS` joints (E106)."""
    if branch.cross is None:
        return True
    if len(agents) < 2:
        report(
            Diagnostic(
                "E105",
                f"`cross` pairs the samples of two or more agents; this step has one (`{agents[0]}`)",
                branch.cross,
                f"drop `cross` to sample it {branch.count} times, or name the agents: `act {agents[0]}, "
                f"OTHER branch {branch.count} cross`",
            )
        )
        return False
    joints = branch.count ** len(agents)
    if joints > MAX_JOINTS:
        report(
            Diagnostic(
                "E106",
                f"`branch {branch.count} cross` over {len(agents)} agents makes {joints} joint combinations, "
                f"more than {MAX_JOINTS}",
                branch.span,
                f"sample fewer alternatives: at most {_largest_count(len(agents))} for {len(agents)} agents",
            )
        )
        return False
    return True


def _largest_count(agents: int) -> int:
    """The largest N whose N^agents joints stay within `MAX_JOINTS`."""
    count = 1
    while (count + 1) ** agents <= MAX_JOINTS:
        count += 1
    return count


def _scorer(s: n.Scorer, report: Report, locate: LocateCode) -> tuple[str | None, str | None, CodeRef | None]:
    """(name, field, code) of a scorer; (None, None, None) after reporting why it is not one."""
    if isinstance(s.fn, n.Ref):
        code = locate(s.fn)
        return (s.fn.text, None, code) if code is not None else (None, None, None)
    if s.fn.name not in REWARDS:
        hint = did_you_mean(s.fn.name, REWARDS) or f'known: {", ".join(REWARDS)}, or "file.py:function"'
        report(Diagnostic("E028", f"unknown reward function `{s.fn.name}` as a scorer", s.fn.span, hint))
        return None, None, None
    if s.field is None or len(s.field) != 2 or s.field[0] != "task":
        report(Diagnostic("E029", "a scorer compares with a task field: `task.FIELD`", s.span))
        return None, None, None
    return s.fn.name, s.field[1], None
