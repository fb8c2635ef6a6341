"""Branching rollouts: the alternatives of a `branch` step, the tree of paths they make (`episode.Tree`),
and its returns.

A branching step samples N alternatives of its event from one pre-action state (one request per member
per alternative, all in the round's batch: the siblings are one prompt sampled N times). Then either
- every alternative continues (a tree): the path ends there and N child paths go on, each a copy of the
  episode that committed its own alternative; or
- one is kept (`keep best|random|first`) and continues on the same path; the others end at once.

Every alternative is recorded and trained. Its return (docs/objective.md, "Branching rollouts"):
- a pruned branch's alternatives (the kept one included) are compared by their scores: R_i = s_i plus
  the invalid-action penalty of the alternative's own invalid outputs;
- a tree's alternative i has R_i = s_i + discount * V(child_i) (s_i = 0 without a scorer), where V of a
  path is its episode return when it is a leaf, else the backup (mean or max) of its own fork's R_j;
- every other event of a path gets V of that path; the root's V is the episode's return in the trace.
A `branch N cross` step's alternatives are its joints (one sample of each agent; `runtime.crossing`):
R_j as above for joint j, and each agent's sample returns the mean R_j of the joints it takes part in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from srpo_dsl.lang.checks.branches import BACKUPS
from srpo_dsl.lang.checks.declarations import BranchInfo
from srpo_dsl.lang.compile.graph import EventNode
from srpo_dsl.registries import REWARDS
from srpo_dsl.runtime.episode import BranchMark, Episode, Event, Leaf, Member, Tree
from srpo_dsl.runtime.hooks import UserScorer
from srpo_dsl.seeds import seed_of


class BranchScorer:
    """A branch's scorer: a reward function on each member's answer (their mean), or the user's Python
    (a `UserScorer`) called with the alternative's answer (a list for K > 1), the task row and, when it takes
    it, the episode a Python reward reads (`Episode.view`, `role_of` naming who acted): the path so far,
    which every alternative shares, with each environment's state."""

    def __init__(self, node: EventNode, role_of: Callable[[Event], str]):
        branch = node.branch
        assert branch is not None and branch.scorer is not None
        self.field, self.role_of = branch.field, role_of
        self.user = UserScorer(branch.code) if branch.code else None
        self.fn = None if branch.code else REWARDS.lookup(branch.scorer)

    def scores(self, ep: Episode, events: Sequence[Event]) -> list[float | None]:
        return [self.score(ep, e.members) for e in events]

    def score(self, ep: Episode, members: Sequence[Member]) -> float:
        answers = [m.parsed if m.valid else None for m in members]
        if self.user is not None:
            answer = answers[0] if len(answers) == 1 else answers
            view = ep.view(self.role_of) if self.user.wants_episode else None
            return self.user(answer, dict(ep.task), view)
        assert self.fn is not None and self.field is not None
        values = [float(self.fn(a if a is None else str(a), ep.task, self.field)) for a in answers]
        return sum(values) / len(values) if values else 0.0


def close(tree: Tree, backup: str, discount: float) -> None:
    """A rollout whose paths are all done: back its returns up; its root (the episode callers hold) gets
    every event of the tree (pruned alternatives too), their invalid outputs and tool calls, and, for a
    tree, the backed-up return, the mean score of its leaves and the first leaf's answer."""
    value = back_up(tree, backup, discount)
    root = tree.root
    root.events = list(tree.events)
    root.tool_calls, root.tool_errors = tree.tool_calls()
    root.invalid_actions = sum(not m.valid for e in tree.events for m in [*e.members, *e.tries])
    root.joints = list(tree.joints)
    root.tree = None
    if not tree.forks:
        return
    leaves = tree.leaves
    root.leaves = [Leaf(p.path, reward=p.team_return, score=p.reward, answer=p.answer) for p in leaves]
    root.answer = leaves[0].answer
    root.record_returns(sum(p.reward for p in leaves) / len(leaves), value, {})


def alternative_mark(
    ep: Episode, branch: BranchInfo, index: int, kept: bool, score: float | None
) -> BranchMark:
    """The trace's record of alternative `index` of the branch `ep` takes at its current step."""
    return BranchMark(f"{ep.event_prefix}/e{ep.step + 1}", index, branch.count, kept, score)


def keep_seed(seed: int, ep: Episode) -> int:
    return seed_of(seed, ep.prompt_id, ep.sample, ep.path, ep.step, "keep")


def back_up(tree: Tree, backup: str, discount: float) -> float:
    """Set every event's `tree_return` from the leaves up; the root path's value (the episode's return)."""
    combine = BACKUPS[backup]
    values: dict[str, float] = {}

    def value(path: Episode) -> float:
        fork = tree.forks.get(path.path)
        if fork is None:
            values[path.path] = path.team_return
            return path.team_return
        returns = [
            (score or 0.0) + discount * value(child) for child, score in zip(fork.children, fork.scores)
        ]
        for joint, ret in zip(fork.joints, returns):
            joint.tree_return = ret
        share(fork.taken, returns)
        values[path.path] = combine(returns)
        return values[path.path]

    root = value(tree.root)
    if tree.forks:  # a tree: every event not an alternative gets the value of the path it is on
        for e in tree.events:
            if e.tree_return is None:
                e.tree_return = values[e.path]
    return root


def share(taken: Sequence[Sequence[Event]], returns: Sequence[float]) -> None:
    """Each event's `tree_return`: the mean of the returns of the alternatives that took it (an alternative
    event: its own; a crossed sample: the mean over the joints it takes part in)."""
    shares: dict[int, tuple[Event, list[float]]] = {}
    for events, ret in zip(taken, returns):
        for e in events:
            shares.setdefault(id(e), (e, []))[1].append(ret)
    for e, rets in shares.values():
        e.tree_return = sum(rets) / len(rets)


def pruned_return(outputs: Sequence[Member], score: float | None, penalty: float) -> float:
    """The return of an alternative of a pruning branch: its score and the penalty of its own invalid
    outputs (its members and their resampled tries)."""
    return (score or 0.0) + penalty * sum(not m.valid for m in outputs)
