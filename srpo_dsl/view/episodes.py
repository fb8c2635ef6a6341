"""Trace episodes -> the compact JSON the page reads (no token ids or log-probs: counts only).

Per member, `hl` is the span of its parsed value in its text (the last occurrence), which the
page highlights; per event, `next` names the transition taken (the next step, or `end`) and
its guard from the graph.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from srpo_dsl.runtime.episode import Member
from srpo_dsl.runtime.traces import TraceEpisode, TraceEvent

if TYPE_CHECKING:
    import networkx as nx


def highlight(text: str, parsed: object) -> list[int] | None:
    """[start, end) of the parsed value in `text` (its last occurrence), or None when not found."""
    if parsed is None:
        return None
    if isinstance(parsed, (list, tuple)):  # a route's replicas: as the router wrote them
        candidates = [",".join(map(str, parsed)), ", ".join(map(str, parsed))]
    else:
        candidates = [str(parsed)]
    for needle in candidates:
        start = text.rfind(needle) if needle else -1
        if start >= 0:
            return [start, start + len(needle)]
    return None


@lru_cache(maxsize=4096)  # a few (node, target) pairs per graph, met once per event
def transition(graph: nx.DiGraph | None, node: str, target: str, target_type: str | None) -> str:
    """`→ verify verifier (when verifier == approve)`: the next step (or end) and the guard taken to it."""
    import networkx as nx

    name = target_type or "end"
    if graph is None or node not in graph or target not in graph:
        return f"→ {name}"
    try:
        path = nx.shortest_path(graph, node, target)
    except nx.NetworkXNoPath:
        return f"→ {name}"
    if len(path) < 2:  # the same node again: the loop's back edge is not a path of length > 0 here
        path = [node, *next((p for p in _cycles_through(graph, node)), [node])]
    when = graph.edges[path[0], path[1]].get("when", "always") if len(path) > 1 else "always"
    via = [graph.nodes[v].get("label", v) for v in path[1:-1]]
    text = f"→ {graph.nodes[target].get('label', name)}"
    text += f" via {', '.join(via)}" if via else ""
    return text + (f" (when {when})" if when != "always" else "")


def _cycles_through(graph: nx.DiGraph, node: str) -> list[list[str]]:
    """Paths from `node` back to itself (a step repeated by its loop), shortest first."""
    import networkx as nx

    paths = []
    for succ in graph.successors(node):
        if nx.has_path(graph, succ, node):
            paths.append(nx.shortest_path(graph, succ, node))
    return sorted(paths, key=len)


def _member_json(m: Member, acts: bool) -> dict[str, object]:
    """A member; an acting agent's action apart, and its value as what it parsed (and highlights)."""
    action = m.parsed.get("action") if acts and m.valid and isinstance(m.parsed, dict) else None
    parsed = m.parsed.get("value") if action is not None and isinstance(m.parsed, dict) else m.parsed
    return {
        "role": m.role,
        "replica": m.replica,
        "policy": m.policy,
        "version": m.policy_version,
        "text": m.text,
        "valid": m.valid,
        "action": action,
        "parsed": parsed,
        "tokens": len(m.response_token_ids),
        "hl": highlight(m.text, parsed) if m.valid else None,
    }


def event_json(graph: nx.DiGraph | None, e: TraceEvent, following: TraceEvent | None) -> dict[str, object]:
    return {
        "type": e.event_type,
        "node": e.node,
        "state": e.state_id,
        "k": e.cardinality,
        "complete": e.complete,
        "members": [_member_json(m, acts=bool(e.actions)) for m in e.members],
        "obs": e.observations,
        "next": transition(
            graph, e.node, following.node if following else "end", following.event_type if following else None
        ),
        "adv": e.update.advantages if e.update else None,
        "clip": e.update.clip_fraction if e.update else None,
    }


def _tree_json(ep: TraceEpisode, e: TraceEvent) -> dict[str, object]:
    """Where an event of a branching episode sits in its tree: its id within the episode, its depth (the
    tree branches its path went through), the event before it, its alternative and its return."""
    local = e.event_id.removeprefix(ep.episode_id)
    b = e.branch
    alt = None
    if b is not None:
        alt = f"{b.index + 1} of {b.of}, {'kept' if b.kept else 'pruned'}"
        if b.agent is not None:  # a crossed sample
            alt = f"{b.agent}'s {alt}"
        if b.score is not None:
            alt += f", score {b.score:.3g}"
    after = e.parent.removeprefix(ep.episode_id) if e.parent else "start"
    return {"name": local, "depth": e.path.count("."), "after": after, "alt": alt, "ret": e.tree_return}


def _path_key(path: str) -> tuple[int, ...]:
    """`.1.0` -> (1, 0): paths sort depth first (a path, then its first child's subtree, ...)."""
    return tuple(int(x) for x in path.split(".")[1:])


def _following(events: list[TraceEvent], i: int) -> TraceEvent | None:
    """The event after event i on its path (traces with parents; before v3: the next one); None at the
    end of a path, or for an alternative that was pruned."""
    e = events[i]
    if e.branch is not None and not e.branch.kept:
        return None
    if any(x.parent is not None for x in events):
        return next((x for x in events if x.parent == e.event_id), None)
    return events[i + 1] if i + 1 < len(events) else None


def episode_json(graph: nx.DiGraph | None, ep: TraceEpisode) -> dict[str, object]:
    events = ep.events
    tree = any(e.branch is not None for e in events)
    out = [event_json(graph, e, _following(events, i)) for i, e in enumerate(events)]
    if tree:
        for item, e in zip(out, events):
            item |= _tree_json(ep, e)
            if e.branch is not None and not e.branch.kept:
                item["next"] = "pruned: this alternative ends here"
        order = sorted(range(len(events)), key=lambda i: (_path_key(events[i].path), i))
        out = [out[i] for i in order]  # depth first: each path's events, then its alternatives' subtrees
    return {
        "id": ep.episode_id,
        "prompt": ep.prompt_id,
        "sample": ep.sample,
        "return": ep.reward,
        "taskScore": ep.score,
        "answer": ep.answer,
        "invalid": ep.invalid_actions,
        "cost": [ep.cost.tokens, ep.cost.calls, ep.cost.tool_calls],
        "roleRewards": ep.role_rewards,
        "leaves": [[leaf.path, leaf.team_return, leaf.score, leaf.answer] for leaf in ep.leaves],
        "events": out,
    }
