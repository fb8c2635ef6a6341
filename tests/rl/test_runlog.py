"""Writing a run folder (`srpo_dsl.rl.loop.runlog`): a resumed run drops the rows after its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

from srpo_dsl.rl.loop.runlog import truncate_jsonl
from srpo_dsl.runfolder import METRICS


def test_truncate_keeps_the_rows_up_to_the_checkpoint_and_drops_a_cut_tail(tmp_path: Path) -> None:
    path = tmp_path / METRICS
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "lo')
    truncate_jsonl(path, 2)
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
