"""A run whose step has every output invalid says so, once, on stderr (docs/training.md)."""

from __future__ import annotations

import json
from pathlib import Path

import srpo_dsl
from srpo_dsl.rl.loop.all_invalid import every_output_invalid
from srpo_dsl.rl.loop.runlog import RunLog
from srpo_dsl.runfolder import METRICS

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


def test_every_output_invalid_needs_every_role_at_one() -> None:
    assert every_output_invalid({"step": 1, "role/a/invalid_rate": 1.0, "role/b/invalid_rate": 1.0})
    assert not every_output_invalid({"step": 1, "role/a/invalid_rate": 1.0, "role/b/invalid_rate": 0.5})
    assert not every_output_invalid({"step": 1, "return": -1.0})  # no outputs: nothing to say
    assert not every_output_invalid({"step": 1, "event/solve/invalid_rate": 1.0})  # roles only


def test_the_run_log_warns_once_when_every_output_of_a_step_is_invalid(tmp_path: Path, capsys) -> None:
    graph = srpo_dsl.load(WORKFLOWS / "quickstart.srpo").graph
    log = RunLog(tmp_path / "run", {}, 0, graph, ())
    log.step({"step": 1, "role/solver/invalid_rate": 0.5, "role/aggregator/invalid_rate": 1.0}, [])
    assert capsys.readouterr().err == ""
    log.evaluation({"step": 2, "role/solver/invalid_rate": 1.0, "role/aggregator/invalid_rate": 1.0}, {})
    log.step({"step": 2, "role/solver/invalid_rate": 1.0, "role/aggregator/invalid_rate": 1.0}, [])
    log.close()
    assert capsys.readouterr().err == (
        "warning: step 2: every output of the held-out evaluation was invalid (no parser read any): does "
        "the model answer this workflow's prompts? builtin(\"tiny\") answers only the quickstart's shapes\n"
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / METRICS).read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]  # the rows are written all the same
