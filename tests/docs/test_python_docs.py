"""docs/python.md runs as written: its ```python snippets, in order, as one script from a copy of the
repository's workflows (the embedded model, CPU), and print what the page says they print."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "python.md"
README = ROOT / "README.md"


def snippets(page: Path = PAGE) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_page_has_the_snippets_the_issue_asks_for() -> None:
    code = "\n".join(snippets())
    for call in ("srpo_dsl.load(", "to_networkx()", "nx.draw_networkx(", ".run(limit=4, samples=2",
                 ".train(", "run.curve", "except srpo_dsl.WorkflowError"):  # fmt: skip
        assert call in code, call


@pytest.mark.slow
def test_every_snippet_runs_in_order_as_one_script(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "workflows", tmp_path / "workflows")
    (tmp_path / "script.py").write_text("\n".join(snippets()), encoding="utf-8")
    env = os.environ | {"PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1", "MPLBACKEND": "Agg"}
    env["HF_DATASETS_CACHE"] = str(tmp_path / "hf-cache")  # `datasets` caches the page's hf:my_csv there
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "quickstart " in out and "Bounds(events=3, calls=4, tool_calls=0, tokens=48, paths=1)" in out
    assert "['solver', 'verifier', 'aggregator'] ['lm']" in out
    assert "RolloutSummary(episodes=8," in out and "K=2" in out
    assert re.search(r"^S 4\+12=\n2$", out, flags=re.M)  # a saved folder and a hf: folder as data
    assert "step 20: return" in out and "['step-20']" in out
    assert "workflows/typo.srpo:13:10: error[E012]" in out and "^^^^^^^" in out
    assert "2 " + str(tmp_path / "runs" / "python-quickstart") not in out  # the path is printed relative
    assert re.search(r"^2 runs/python-quickstart already exists", out, flags=re.M)
    for png in ("quickstart-graph.png", "quickstart-curve.png"):
        assert (tmp_path / png).stat().st_size > 1000
    assert {p.name for p in (tmp_path / "runs" / "python-rollouts").iterdir()} >= {
        "traces.jsonl",
        "graph.json",
    }


@pytest.mark.slow
def test_the_readme_s_python_snippet_runs(tmp_path: Path) -> None:
    (code,) = snippets(README)
    shutil.copytree(ROOT / "workflows", tmp_path / "workflows")
    (tmp_path / "script.py").write_text(code, encoding="utf-8")
    env = os.environ | {"PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    done = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "Bounds(events=3, calls=4, tool_calls=0, tokens=48, paths=1)"
    assert lines[1].startswith("[0, 10] [")
