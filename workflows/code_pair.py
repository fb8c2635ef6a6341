"""CoMLRL's two-agent code task (MAGRPO, multi-turn), written as a user of srpo-dsl writes it.

Two agents write one program together at each turn: `aux` a helper function, `main` the function the task
asks for (which may call the helper). `run_pair(outputs, row, state, time_limit)` is the environment: it
runs the two together against the task's hidden tests (code_env.py's sandboxed runner), feeds the
failures back to both, and is done when every test passes; its reward is the change of the fraction
passed, so an episode's rewards sum to the fraction its last program passes. `turn_score(answer, row)`
is the per-turn reward r of CoMLRL's return `r + gamma * mean(children)`: the fraction the turn's joint
program passes (`answer` is [aux's code, main's code]).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

# code_env.py (beside this file) runs a program against tests in a subprocess; loaded by path, as srpo-dsl
# loads workflow code (no package, nothing on sys.path)
_SPEC = importlib.util.spec_from_file_location("code_env_runner", Path(__file__).with_name("code_env.py"))
_CODE_ENV = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_CODE_ENV)


def _program(aux: str | None, main: str | None) -> str | None:
    parts = [p for p in (aux, main) if p]
    return "\n\n".join(parts) if main else None


def _passed(program: str | None, row: dict, time_limit: float) -> float:
    if program is None:
        return 0.0
    hidden = row["hidden_tests"]
    return _CODE_ENV.run_program(program, hidden, time_limit).count(None) / len(hidden)


def turn_score(answer: list | None, row: dict, time_limit: float = 5.0) -> float:
    """The fraction of the hidden tests the turn's joint program passes."""
    aux, main = answer if isinstance(answer, list) else (None, None)
    return _passed(_program(aux, main), row, time_limit)


def _last(outputs: dict, agent: str) -> str | None:
    valid = [o["value"] for o in outputs.get(agent, []) if o["valid"]]
    return valid[-1] if valid else None


def run_pair(outputs: dict, row: dict, state: dict, time_limit: float = 5.0):
    """One turn: (observations for aux and main, done, reward)."""
    program = _program(_last(outputs, "aux"), _last(outputs, "main"))
    passed = _passed(program, row, time_limit)
    reward, state["passed"] = passed - state.get("passed", 0.0), passed
    if program is None:
        note = "no main function this turn: write it in <code>...</code>"
        return {"aux": note, "main": note}, False, reward
    failures = [f for f in _CODE_ENV.run_program(program, row["hidden_tests"], time_limit) if f is not None]
    if not failures:
        return {"aux": "all tests pass", "main": "all tests pass"}, True, reward
    text = f"{len(failures)} of {len(row['hidden_tests'])} tests fail:\n" + "\n".join(failures[:5])
    return {"aux": text, "main": text}, False, reward
