"""Corrupted copies of a recorded run folder (tests/support/fuzzing.py) through `srpo-dsl view`,
`srpo-dsl audit` and the sweep's run readers: one clear line and a non-zero exit (or the documented skip),
never exit 3, no traceback."""

from __future__ import annotations

import json
import shutil

import pytest

from srpo_dsl.runfolder import RunError
from srpo_dsl.sweep.dynamics import read_run_dynamics
from srpo_dsl.sweep.results import read_run
from tests.support.fuzz_targets import command_stderr, run_problem
from tests.support.fuzzing import RUN, RUN_FILES, RUN_OPS, Case, cases, corrupt_run, shrink

CASES = cases(RUN_FILES, RUN_OPS, default=60)


def test_deep_json_line_is_one_bad_line(tmp_path):
    """A 100,000-deep JSON line in a run file: `view` and `audit` name the file and line (it was exit 3)."""
    shutil.copytree(RUN, tmp_path / "run")
    deep = "[" * 100000 + "]" * 100000 + "\n"
    with (tmp_path / "run" / "traces.jsonl").open("a") as f:
        f.write(deep)
    n = len((tmp_path / "run" / "traces.jsonl").read_text().splitlines())
    for args in (["view", tmp_path / "run", "-o", tmp_path / "v.html"], ["audit", tmp_path / "run"]):
        code, said = command_stderr(args)
        assert code not in (0, 3) and f"traces.jsonl:{n}: invalid JSON: nested too deeply" in said, said


@pytest.mark.slow
def test_corrupted_run_folders(tmp_path):
    for case in CASES:
        found = run_problem(case, tmp_path / "run")
        if found:
            small = shrink(case, lambda c: run_problem(c, tmp_path / "run") is not None)
            pytest.fail(f"{found}\n{small.describe(corrupt_run(small))}")


def test_a_huge_number_in_metrics_is_left_out_of_its_chart(tmp_path):
    """Fuzz case 123 (seed 48): a metrics.jsonl value of 1e400 (infinity) ended `view` with exit 3."""
    case = Case(48, 123, RUN / "metrics.jsonl", [("number", 558561333, 155328690)])
    shutil.copytree(RUN, tmp_path / "run")
    (tmp_path / "run" / "metrics.jsonl").write_bytes(corrupt_run(case))
    code, said = command_stderr(["view", tmp_path / "run", "-o", tmp_path / "v.html"])
    assert code == 0, said
    assert "<svg" in (tmp_path / "v.html").read_text()


@pytest.mark.parametrize("row", ["[1, 2]", '"x"', "3"])
@pytest.mark.parametrize("name", ["metrics.jsonl", "eval.jsonl"])
def test_a_run_file_row_that_is_no_object_is_one_bad_line(tmp_path, name, row):
    """Fuzz case 140 (seed 48): a metrics.jsonl row that is a list ended `view` with exit 3
    (`'list' object has no attribute 'items'`); every run file's reader now names the file and line."""
    shutil.copytree(RUN, tmp_path / "run")
    path = tmp_path / "run" / name
    lines = path.read_text().splitlines()
    path.write_text("\n".join([row, *lines[1:]]) + "\n")
    code, said = command_stderr(["view", tmp_path / "run", "-o", tmp_path / "v.html"])
    kind = type(json.loads(row)).__name__
    assert code not in (0, 3) and f"{name}:1: a row is a JSON object, not {kind}" in said, said


@pytest.mark.parametrize("name", ["metrics.jsonl", "eval.jsonl", "traces.jsonl"])
def test_an_integer_beyond_a_float_is_one_bad_line(tmp_path, name):
    """Fuzz cases 209, 283, 425 (seed 48): a 400-digit integer in a run file overflowed where it became a
    float (the sweep's readers, `view`'s charts: exit 3); every reader now refuses it as bad JSON."""
    shutil.copytree(RUN, tmp_path / "run")
    path = tmp_path / "run" / name
    first, *rest = path.read_text().splitlines()
    huge = first[:-1] + ', "huge": ' + "1" * 400 + "}"  # the first row with one more key, 400 digits long
    path.write_text("\n".join([huge, *rest]) + "\n")
    code, said = command_stderr(["view", tmp_path / "run", "-o", tmp_path / "v.html"])
    assert code not in (0, 3) and f"{name}:1: invalid JSON: number too large" in said, said


@pytest.mark.parametrize("name", ["metrics.jsonl", "eval.jsonl"])
def test_a_step_of_1e400_is_one_line(tmp_path, name):
    """Fuzz cases 930, 994, 1072 at 2,000 cases (seed 48): a step of 1e400 (infinity) in eval.jsonl made
    `view` end with exit 3 (int(inf): OverflowError); it is a file that is not a run's, one line."""
    shutil.copytree(RUN, tmp_path / "run")
    path = tmp_path / "run" / name
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text(
        "\n".join(json.dumps(r).replace(f'"step": {r["step"]}', '"step": 1e400') for r in rows) + "\n"
    )
    code, said = command_stderr(["view", tmp_path / "run", "-o", tmp_path / "v.html"])
    assert code not in (0, 3) and len(said.strip().splitlines()) == 1 and "OverflowError" in said, said
    with pytest.raises(RunError):
        read_run_dynamics(tmp_path / "run", 0) if name == "metrics.jsonl" else read_run(
            tmp_path / "run", 0, 0.0
        )
