"""Event-atomic batching (docs/objective.md §9): whole events, never rows, go to ranks and micro-batches.

All rows of one event share one ratio and one clip, so they must be in the same
micro-batch of the same rank; the loss is normalised by the global event count of the
optimizer step, so this layout does not change the update. The rows of one conversation are scored in
one pass, so the events they touch are one atom (`linked_atoms`).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence


def group_rows(event_ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    """Row indices of each event, events in order of first appearance."""
    rows: dict[Hashable, list[int]] = {}
    for i, event in enumerate(event_ids):
        rows.setdefault(event, []).append(i)
    return rows


def balance(weights: Sequence[int], num_bins: int) -> list[list[int]]:
    """Greedy largest-first: each item (by index) goes to the least-loaded bin.

    Ties: heavier items first, then lower index; least-loaded bin, then lower bin index.
    Deterministic; each bin lists its items in increasing index order.
    """
    order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    heap = [(0, b) for b in range(num_bins)]
    bins: list[list[int]] = [[] for _ in range(num_bins)]
    for i in order:
        load, b = heapq.heappop(heap)
        bins[b].append(i)
        heapq.heappush(heap, (load + weights[i], b))
    return [sorted(items) for items in bins]


def plan_batches(
    event_ids: Sequence[Hashable], token_counts: Sequence[int], *, world_size: int, micro_batches: int
) -> list[list[list[int]]]:
    """Row indices per rank per micro-batch: plan[rank][micro] = [row, ...].

    Events are balanced by total tokens first over ranks, then over each rank's
    micro-batches. Every row appears exactly once; an event's rows are never split.
    A bin may be empty when there are fewer events than bins.
    """
    if len(event_ids) != len(token_counts):
        raise ValueError(f"{len(event_ids)} event ids but {len(token_counts)} token counts")
    if world_size < 1 or micro_batches < 1:
        raise ValueError(f"world_size and micro_batches must be >= 1, got {world_size} and {micro_batches}")
    if any(n < 0 for n in token_counts):
        raise ValueError("token counts must be >= 0")
    events = list(group_rows(event_ids).values())
    tokens = [sum(token_counts[i] for i in rows) for rows in events]
    plan = []
    for rank_events in balance(tokens, world_size):
        micro = balance([tokens[e] for e in rank_events], micro_batches)  # positions in rank_events
        plan.append([sorted(row for j in slot for row in events[rank_events[j]]) for slot in micro])
    return plan


def budget_batches(
    atom_ids: Sequence[Hashable], token_counts: Sequence[int], budget: int, *, padded: bool = True
) -> list[list[int]]:
    """Row indices per micro-batch, each holding whole atoms (events, or episodes) and at most `budget`
    tokens as the forward processes them: its rows x its longest row (`padded`), or the sum of its rows
    (packed rows). First fit, largest atoms first (by their tokens, then first appearance); an atom over
    the budget alone has a micro-batch of its own. Deterministic; at least one (empty without rows)."""
    if len(atom_ids) != len(token_counts):
        raise ValueError(f"{len(atom_ids)} ids but {len(token_counts)} token counts")
    if budget < 1:
        raise ValueError(f"the token budget must be >= 1, got {budget}")

    def cost(rows: int, longest: int, total: int) -> int:
        return rows * longest if padded else total

    atoms = list(group_rows(atom_ids).values())
    sizes = [(len(r), max(token_counts[i] for i in r), sum(token_counts[i] for i in r)) for r in atoms]
    order = sorted(range(len(atoms)), key=lambda a: (-cost(*sizes[a]), a))
    bins: list[list[int]] = []  # atoms per micro-batch
    shapes: list[tuple[int, int, int]] = []  # (rows, longest row, tokens) per micro-batch
    for a in order:
        joined = [(n + sizes[a][0], max(m, sizes[a][1]), s + sizes[a][2]) for n, m, s in shapes]
        fits = [b for b, shape in enumerate(joined) if cost(*shape) <= budget]
        if fits:
            bins[fits[0]].append(a)
            shapes[fits[0]] = joined[fits[0]]
        else:
            bins.append([a])
            shapes.append(sizes[a])
    return [sorted(i for a in b for i in atoms[a]) for b in bins] or [[]]


def linked_atoms(atom_ids: Sequence[int], follows: Sequence[int]) -> list[int]:
    """Each row's atom id once the atoms of linked rows are merged (row i is linked to row `follows[i]`;
    -1: none), by union-find; a merged atom takes the smallest of its ids."""
    parent = {a: a for a in atom_ids}

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]  # path halving
            a = parent[a]
        return a

    for i, r in enumerate(follows):
        if r >= 0:
            x, y = root(atom_ids[i]), root(atom_ids[r])
            parent[max(x, y)] = min(x, y)
    return [root(a) for a in atom_ids]


def drop_incomplete(
    event_ids: Sequence[Hashable], cardinality: Sequence[int], member_index: Sequence[int] | None = None
) -> tuple[list[int], int]:
    """Keep only complete events: (kept row indices, number of dropped events).

    cardinality[i] is the expected K_e stored on row i. An event is complete when its
    rows agree on K_e and it has exactly K_e rows (with member_index: exactly the members
    0..K_e-1). An incomplete event is dropped whole, never trained on in part.
    """
    if len(cardinality) != len(event_ids) or (
        member_index is not None and len(member_index) != len(event_ids)
    ):
        raise ValueError("event_ids, cardinality and member_index must have one entry per row")
    kept: list[int] = []
    dropped = 0
    for rows in group_rows(event_ids).values():
        k = {cardinality[i] for i in rows}
        complete = len(k) == 1 and len(rows) == k.pop()
        if complete and member_index is not None:
            complete = sorted(member_index[i] for i in rows) == list(range(len(rows)))
        if complete:
            kept.extend(rows)
        else:
            dropped += 1
    return sorted(kept), dropped
