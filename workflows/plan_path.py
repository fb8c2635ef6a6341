"""PettingLLMs' plan-path grid, written as a user of srpo-dsl writes an environment.

A walker moves on a grid (`row["grid"]`: strings, `#` a wall) from `row["start"]` to
`row["goal"]`, one move a turn (`<move>up</move>`: up, down, left or right). The environment
`walk(outputs, row, state)` keeps the walker's position in `state`, applies the move (a move
into a wall or off the grid leaves it where it is), and answers with the grid as the walker
now sees it. It is done at the goal, with reward 1 there (0 on every other step).
"""

from __future__ import annotations

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def _picture(grid: list[str], at: tuple[int, int], goal: tuple[int, int]) -> str:
    """The grid with the walker `A` and the goal `G`."""
    rows = [list(line) for line in grid]
    rows[goal[0]][goal[1]] = "G"
    rows[at[0]][at[1]] = "A"
    return "\n".join("".join(r) for r in rows)


def walk(outputs: dict, row: dict, state: dict):
    """One move of the walker: ({walker: the grid now}, at the goal, 1.0 at the goal else 0.0)."""
    grid, goal = row["grid"], tuple(row["goal"])
    at = state.setdefault("at", tuple(row["start"]))
    moves = [o["value"].strip().lower() for o in outputs["walker"] if o["valid"]]
    move = moves[-1] if moves else None
    note = f"unknown move {move!r}: use up, down, left or right" if move not in MOVES else None
    if note is None:
        dr, dc = MOVES[move]
        r, c = at[0] + dr, at[1] + dc
        inside = 0 <= r < len(grid) and 0 <= c < len(grid[r])
        if inside and grid[r][c] != "#":
            at = state["at"] = (r, c)
        else:
            note = f"`{move}` is blocked"
    done = at == goal
    seen = _picture(grid, at, goal)
    text = "you reached the goal" if done else (f"{note}\n{seen}" if note else seen)
    return {"walker": text}, done, 1.0 if done else 0.0
