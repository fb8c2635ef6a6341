"""Reading a run folder (`srpo_dsl.runfolder`): one JSON Lines reader for every file of a run, what a
killed writer leaves, and the readers `plot`, `view`, `sweep` and the Python API share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srpo_dsl.runfolder import (
    CONFIG,
    METRICS,
    RunError,
    as_float,
    as_int,
    checkpoint_folder,
    checkpoint_folders,
    read_config,
    read_curve,
    read_jsonl,
)


def test_read_jsonl_leaves_out_an_unfinished_last_line_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / METRICS
    assert read_jsonl(path) == []  # no file yet: no rows
    path.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3, "sc')  # killed mid-line
    notes: list[str] = []
    assert read_jsonl(path, notes) == [{"step": 1}, {"step": 2}]
    assert notes == ["metrics.jsonl: line 4 is unfinished (the run was stopped mid-step); left out"]
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]  # without `notes`: the same rows


def test_a_broken_line_before_the_last_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / METRICS
    path.write_text('{"step": 1}\n{oops\n{"step": 3}\n')
    with pytest.raises(RunError) as err:
        read_jsonl(path)
    assert str(err.value) == f"{path}:2: invalid JSON: Expecting property name enclosed in double quotes"


def test_read_config(tmp_path: Path) -> None:
    assert read_config(tmp_path) is None
    (tmp_path / CONFIG).write_text('{"workflow": "w.srpo", "options": {"steps": 3}}')
    assert read_config(tmp_path) == {"workflow": "w.srpo", "options": {"steps": 3}}
    (tmp_path / CONFIG).write_text("[1, 2]")
    with pytest.raises(RunError, match="is not a JSON object"):
        read_config(tmp_path)


def test_read_curve_in_percent(tmp_path: Path) -> None:
    assert read_curve(tmp_path) is None  # not evaluated yet
    rows = [
        {"step": 0, "k": 4, "avg_at_k": 0.25, "pass_at_k": 0.5},
        {"step": 5, "k": 4, "avg_at_k": 0.5, "pass_at_k": 1},
    ]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = read_curve(tmp_path)
    assert (curve.k, curve.steps, curve.avg, curve.passed) == (4, [0, 5], [25.0, 50.0], [50.0, 100.0])


def test_the_checkpoints_are_the_complete_step_folders_by_step(tmp_path: Path) -> None:
    assert checkpoint_folders(tmp_path) == []  # no checkpoints/ yet
    for name in ("step-10", "step-2", ".step-11.tmp", "step-x"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
    assert checkpoint_folders(tmp_path) == [checkpoint_folder(tmp_path, 2), checkpoint_folder(tmp_path, 10)]


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, True, 2, 2.5, "3", "x", 1e400])
def test_as_int_and_as_float_read_a_json_value_as_int_and_float_do(value: object) -> None:
    """The readers of a row's numbers: the value `int` and `float` give, or their very error (its message
    is shown in a run file's error line)."""
    for typed, builtin in ((as_int, int), (as_float, float)):
        try:
            expected: object = builtin(value)
        except (TypeError, ValueError, OverflowError) as exc:
            with pytest.raises(type(exc)) as err:
                typed(value)
            assert str(err.value) == str(exc)
        else:
            assert typed(value) == expected
