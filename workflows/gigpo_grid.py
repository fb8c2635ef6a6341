"""A 3x3 grid for GiGPO's anchor states, written as a user of srpo-dsl writes an environment.

A walker moves from `row["start"]` to `row["goal"]` (cells `[row, col]`, 1-based), one move a turn
(`<move>up</move>`: up, down, left or right); a move off the grid leaves it where it is. The environment
`walk(outputs, row, state, step_cost)` keeps the position in `state` and returns, with its observation,
the position as the state key (`"row,col"`): two rollouts at one cell are in one state, whatever else
their observations say (a blocked move's note), which is what `advantage = state` groups by. Each move
that does not reach the goal costs `step_cost`; reaching it gives 1.0 and ends the episode.
"""

from __future__ import annotations

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
SIZE = 3


def describe(at: tuple[int, int], goal: tuple[int, int]) -> str:
    """What the walker sees: its cell and the goal's."""
    return f"You are at row {at[0]}, column {at[1]}. The goal is at row {goal[0]}, column {goal[1]}."


def moved(at: tuple[int, int], move: str | None) -> tuple[tuple[int, int], str | None]:
    """The cell after `move`, and a note when it was not one (unknown, or off the grid)."""
    if move not in MOVES:
        return at, f"unknown move {move!r}: use up, down, left or right"
    r, c = at[0] + MOVES[move][0], at[1] + MOVES[move][1]
    if not (1 <= r <= SIZE and 1 <= c <= SIZE):
        return at, f"`{move}` leaves the grid"
    return (r, c), None


def walk(outputs: dict, row: dict, state: dict, step_cost: float = 0.1):
    """One step: ({walker: where it is now}, at the goal, its reward, the cell as the state key). The
    first step (no outputs: `step grid` before anyone moved) shows the start."""
    goal = tuple(row["goal"])
    at = state.setdefault("at", tuple(row["start"]))
    note = None
    if outputs:
        moves = [o["value"].strip().lower() for o in outputs["walker"] if o["valid"]]
        at, note = moved(at, moves[-1] if moves else None)
        state["at"] = at
    done = at == goal
    reward = 1.0 if done else (-step_cost if outputs else 0.0)
    text = "You reached the goal." if done else describe(at, goal)
    return {"walker": f"{note}\n{text}" if note else text}, done, reward, f"{at[0]},{at[1]}"
