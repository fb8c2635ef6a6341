"""PettingLLMs' code environment, written as a user of srpo-dsl writes an environment.

`code_env.srpo` names `run_tests(outputs, row, state, time_limit)`. At each step it runs the
coder's program (`<code>...</code>`) against the tester's assert-tests (`<tests>`, one
`assert` a line) in a subprocess (`python -I`, an empty temporary folder, no inherited
environment, killed after `time_limit` seconds: it bounds runaway programs, it is not a
security boundary), and feeds the failures back to both agents. The episode is done when every
one of the tester's tests passes. The reward of a step is the change, since the last step, of
the fraction of the task's hidden tests (`row["hidden_tests"]`) the program passes, so the
rewards of an episode sum to the fraction its last program passes. `state` keeps that fraction
and the number of turns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

MAX_SHOWN = 5  # failures an observation lists

# Runs in the child: the program, then each test in a copy of its namespace; prints one JSON list with
# each test's failure (null when it passed). What the program prints is swallowed.
_HARNESS = r"""
import contextlib, io, json, sys
job = json.load(sys.stdin)
namespace, out = {}, []
with contextlib.redirect_stdout(io.StringIO()):
    try:
        exec(job["program"], namespace)
    except BaseException as exc:
        out = [f"the program raised {type(exc).__name__}: {exc}"] * len(job["tests"])
    else:
        for test in job["tests"]:
            try:
                exec(test, dict(namespace))
                out.append(None)
            except AssertionError:
                out.append(f"failed: {test}")
            except BaseException as exc:
                out.append(f"{test}  raised {type(exc).__name__}: {exc}")
print(json.dumps(out))
"""


def run_program(program: str, tests: list[str], time_limit: float) -> list[str | None]:
    """Each test's failure (None when it passed), every test in one subprocess."""
    job = json.dumps({"program": program, "tests": tests})
    with tempfile.TemporaryDirectory(prefix="srpo-code-env-") as folder:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", _HARNESS],
                input=job,
                cwd=folder,
                env={"PATH": os.defpath},
                capture_output=True,
                text=True,
                timeout=time_limit,
            )
        except subprocess.TimeoutExpired:
            return [f"the tests did not finish within {time_limit:g} s"] * len(tests)
    if done.returncode != 0 or not done.stdout.strip():
        lines = done.stderr.strip().splitlines()
        return [f"the program crashed: {lines[-1] if lines else done.returncode}"] * len(tests)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _last_value(outputs: dict, agent: str) -> str | None:
    """The agent's last valid parsed output (its tag's content), or None."""
    valid = [o["value"] for o in outputs.get(agent, []) if o["valid"]]
    return valid[-1] if valid else None


def _assertions(tests: str | None) -> list[str]:
    return [line.strip() for line in (tests or "").splitlines() if line.strip().startswith("assert")]


def run_tests(outputs: dict, row: dict, state: dict, time_limit: float = 5.0):
    """One turn: (observations for coder and tester, done, reward)."""
    state["turn"] = state.get("turn", 0) + 1
    program, tests = _last_value(outputs, "coder"), _assertions(_last_value(outputs, "tester"))
    hidden = row["hidden_tests"]
    passed = 0.0 if program is None else run_program(program, hidden, time_limit).count(None) / len(hidden)
    reward, state["passed"] = passed - state.get("passed", 0.0), passed
    if program is None:
        note = "no program this turn: write it in <code>...</code>"
        return {"coder": note, "tester": note}, False, reward
    if not tests:
        return {"coder": "no tests yet", "tester": "no tests: write `assert` lines in <tests>"}, False, reward
    failures = [f for f in run_program(program, tests, time_limit) if f is not None]
    if not failures:
        text = f"all {len(tests)} tests pass"
        return {"coder": text, "tester": text}, True, reward
    shown = "\n".join(failures[:MAX_SHOWN])
    text = f"turn {state['turn']}: {len(failures)} of {len(tests)} tests fail:\n{shown}"
    return {"coder": text, "tester": text}, False, reward


# ---- AT-GRPO's per-agent scores (workflows/code_at_grpo.srpo): each candidate of a turn, scored alone ----
def coder_score(program: str | None, row: dict, time_limit: float = 5.0) -> float:
    """A coder's candidate: the fraction of the task's hidden tests its program passes."""
    if program is None:
        return 0.0
    hidden = row["hidden_tests"]
    return run_program(program, hidden, time_limit).count(None) / len(hidden)


def tester_score(tests: str | None, row: dict, time_limit: float = 5.0) -> float:
    """A tester's candidate: the fraction of its `assert` lines the task's reference solution passes (a test
    a correct program fails is a wrong test); no tests score 0."""
    lines = _assertions(tests)
    if not lines:
        return 0.0
    return run_program(row["solution"], lines, time_limit).count(None) / len(lines)
