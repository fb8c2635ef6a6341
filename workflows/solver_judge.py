"""rLLM's solver-judge reward, credited per member (docs/objective.md §5, credit per member and per round).

`solver_judge.srpo` names `reward(answer, row, episode)`: each solver replica is scored on its own
answer (`solver#1`, `solver#2`: 1 if right), the judge on its pick (`judge`: 1 if it gave a right
answer that one of the solvers proposed). The judge's entry is the episode's score.
"""

from __future__ import annotations


def _right(value: object, row: dict) -> bool:
    return value is not None and str(value).strip() == str(row["answer"]).strip()


def reward(answer: str | None, row: dict, episode) -> dict[str, float]:
    solved = next(e for e in episode.events if e.role == "solver")
    credit = {f"solver#{m.replica}": float(m.valid and _right(m.parsed, row)) for m in solved.members}
    proposed = {str(m.parsed) for m in solved.members if m.valid}
    credit["judge"] = float(str(answer) in proposed and _right(answer, row))
    return credit
