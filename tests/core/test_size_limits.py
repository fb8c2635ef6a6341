"""What one data row and one observation may hold (docs/traces.md, "Size limits"): a row over the limit
is refused in one line naming it; an observation over it is cut, and its trace says so and how long it
was. The limits are 1 MiB by default and set by environment variables."""

import json
import os

import pytest

from srpo_dsl.envs.data import load_tasks
from srpo_dsl.limits import OBSERVATION_VARIABLE, ROW_VARIABLE, bounded
from tests.support.clitools import cli

CODE = """
def calc(queries):
    return ["x" * 5000 for q in queries]
"""
WORKFLOW = """workflow w
policy lm = hf("srpo-dsl-tests/not-here") with (max_tokens = 8)
task jsonl(data = "d.jsonl")
tool calc = "user.py:calc"(timeout = 5)
agent a uses lm prompt "p.j2" emits text
agent b uses lm prompt "p.j2" emits boxed
act a
call calc on a
aggregate b
reward exact_match(b, task.answer)
"""


def _rows(path, *questions):
    path.write_text("".join(json.dumps({"question": q, "answer": "1"}) + "\n" for q in questions))
    return path


def test_a_row_over_the_default_limit_is_refused_naming_its_line(tmp_path):
    """The real default (1 MiB): a 2 MB row on line 2 is one line, exit 1, before anything runs."""
    data = _rows(tmp_path / "d.jsonl", "1+0", "y" * (2 << 20), "2+0")
    (tmp_path / "r.json").write_text(json.dumps({"*": ["\\boxed{1}"]}))
    args = ("--data", data, "--backend", "scripted", "--model", tmp_path / "r.json")
    result = cli("run", "workflows/math_fixed.srpo", *args)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"error: {data}:2: a row of 2.0 MB, over the limit of 1.0 MB a row ({ROW_VARIABLE} raises it)\n"
    )
    assert len(load_tasks(_rows(tmp_path / "ok.jsonl", "z" * 500_000), kind="math")) == 1  # under it


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_the_row_limit_is_set_by_its_variable(tmp_path, monkeypatch, suffix):
    monkeypatch.setenv(ROW_VARIABLE, "1000")
    rows = [{"question": "q" * n, "answer": "1"} for n in (10, 2000)]
    path = tmp_path / f"d{suffix}"
    path.write_text(json.dumps(rows) if suffix == ".json" else "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"(row 1|:2): a row of 2\.0 KB, over the limit of 1000 B a row"):
        load_tasks(path, kind="math")
    monkeypatch.setenv(ROW_VARIABLE, "4000")
    assert len(load_tasks(path, kind="math")) == 2


def test_an_observation_over_the_limit_is_cut_and_its_trace_says_so(tmp_path):
    """A Python tool's 5,000-character result, the limit set to 1,000: the prompt after it and the trace
    hold 1,000 characters and a marker, and the trace records the original length."""
    (tmp_path / "user.py").write_text(CODE)
    (tmp_path / "p.j2").write_text(
        "{{ task.question }} {% for o in observations %}{{ o.result }}{% endfor %}"
    )
    (tmp_path / "w.srpo").write_text(WORKFLOW)
    _rows(tmp_path / "d.jsonl", "1+0")
    (tmp_path / "r.json").write_text(json.dumps({"a": ["<calc>1</calc>"], "b": ["\\boxed{1}"]}))
    env = {**os.environ, OBSERVATION_VARIABLE: "1000"}
    args = ("--backend", "scripted", "--model", tmp_path / "r.json", "--out", tmp_path / "out")
    result = cli("run", tmp_path / "w.srpo", *args, env=env)
    assert result.returncode == 0, result.stderr
    (trace,) = [json.loads(line) for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    (observation,) = trace["events"][0]["observations"]
    assert observation["truncated"] == 5000 and observation["result"].startswith("x" * 1000 + "\n[... cut")
    assert observation["result"].endswith("4000 of 5000 characters left out]")
    prompt = bytes(trace["events"][1]["members"][0]["prompt_token_ids"]).decode()
    assert "x" * 1001 not in prompt and "x" * 1000 + "\n[... cut by srpo-dsl" in prompt


def test_bounded_keeps_text_at_the_limit_whole(monkeypatch):
    monkeypatch.setenv(OBSERVATION_VARIABLE, "10")
    assert bounded("text", "a" * 10) == {"text": "a" * 10}
    cut = bounded("text", "a" * 11)
    assert cut["truncated"] == 11 and cut["text"].startswith("a" * 10 + "\n[... cut by srpo-dsl: 1 of 11")


def test_a_loaders_row_over_the_limit_is_its_error(tmp_path):
    """A Python loader's row is bounded as a file's: the error names the loader's file and the row."""
    (tmp_path / "user.py").write_text(
        CODE + 'def load(split):\n    return [{"question": "q" * n, "answer": "1"} for n in (10, 2000)]\n'
    )
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "w.srpo").write_text(WORKFLOW.replace('jsonl(data = "d.jsonl")', '"user.py:load"()'))
    (tmp_path / "r.json").write_text(json.dumps({"*": ["\\boxed{1}"]}))
    env = {**os.environ, ROW_VARIABLE: "1000"}
    result = cli("run", tmp_path / "w.srpo", "--backend", "scripted", "--model", tmp_path / "r.json", env=env)
    assert result.returncode == 1 and str(tmp_path / "user.py") in result.stderr, result.stderr
    assert "row 1 of split 'train': a row of 2.0 KB, over the limit of 1000 B a row" in result.stderr


def test_a_retrieved_document_over_the_limit_is_cut_in_the_prompt_and_the_trace(tmp_path):
    """A bm25 corpus with one 4,999-character document, the limit set to 1,000: the `documents` the next
    prompt shows and the trace's document hold the cut text; the trace records the original length."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "0", "contents": '"Big"\n' + " ".join(["word"] * 1000)}) + "\n")
    (tmp_path / "p.j2").write_text("{{ task.question }} {% for d in documents %}{{ d }}{% endfor %}")
    (tmp_path / "w.srpo").write_text(
        'workflow w\npolicy lm = hf("srpo-dsl-tests/not-here") with (max_tokens = 64)\n'
        'task jsonl(data = "d.jsonl")\ntool web = bm25(corpus = "c.jsonl", top_k = 1)\n'
        'agent s uses lm prompt "p.j2" emits search\nagent b uses lm prompt "p.j2" emits boxed\n'
        "parallel s\ncall web on s\naggregate b\nreward exact_match(b, task.answer)\n"
    )
    _rows(tmp_path / "d.jsonl", "word")
    (tmp_path / "r.json").write_text(
        json.dumps({"s": ["<think>t</think><search>word</search>"], "b": ["\\boxed{1}"]})
    )
    env = {**os.environ, OBSERVATION_VARIABLE: "1000"}
    args = ("--backend", "scripted", "--model", tmp_path / "r.json", "--out", tmp_path / "out")
    result = cli("run", tmp_path / "w.srpo", *args, env=env)
    assert result.returncode == 0, result.stderr
    (trace,) = [json.loads(line) for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    (document,) = trace["events"][0]["observations"][0]["documents"]
    assert document["truncated"] == 4999 and len(document["text"]) < 1100
    prompt = bytes(trace["events"][1]["members"][0]["prompt_token_ids"]).decode()
    assert "of 4999 characters left out]" in prompt and "word " * 201 not in prompt
