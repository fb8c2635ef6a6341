"""A workflow's retrieval server as a user meets it: down, slow, broken or failing mid-run (one line, exit 2,
the episodes already done kept), and pointed elsewhere without editing the file (`--set tool.NAME.OPTION`).

`workflows/search_r1.srpo` (its tool `search` is `http(url = "http://127.0.0.1:8000/retrieve")`) runs on
the scripted backend against `tests/support/retrieval_server.py`, a real HTTP server on a free port."""

from __future__ import annotations

import json
import socket

import pytest

import srpo_dsl
from srpo_dsl.envs.retrieval import Bm25Retriever
from srpo_dsl.lang.compile.graph import ToolNode
from srpo_dsl.sweep.experiment import Cell, Experiment
from srpo_dsl.sweep.runner import Job, train_command
from tests.support.clitools import ROOT, cli
from tests.support.retrieval_server import RetrievalServer

SEARCH_R1 = ROOT / "workflows/search_r1.srpo"
SEARCH, ANSWER = (
    "<think>t</think><search>capital of France</search>",
    "<think>t</think><answer>Paris</answer>",
)


@pytest.fixture(scope="module")
def bm25():
    return Bm25Retriever(ROOT / "data/wiki_sample.jsonl")


def _run(tmp_path, replies: list[str], *extra: object, command: str = "run"):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({"researcher": replies}))
    sizes = ("--limit", "2") + (("-k", "1") if command == "eval" else ("--samples", "1"))
    args = (command, SEARCH_R1, "--backend", "scripted", "--model", script, *sizes)
    return cli(*args, "--out", tmp_path / "out", *extra)


def _free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/retrieve"


def _one_line(done) -> str:
    """The one error line, last on stderr (above it only the progress bar a run had drawn), no traceback."""
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line or "Traceback" in line]
    assert errors == [lines[-1]] and lines[-1].startswith("error: tool `search`: "), done.stderr
    return lines[-1]


def test_no_server_is_one_line_before_anything_loads(tmp_path):
    """The shipped workflow as it is, nothing on port 8000 (the trial's `internal error`, exit 3)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.skip("something listens on 127.0.0.1:8000")
    done = _run(tmp_path, [ANSWER])
    line = _one_line(done)
    assert done.returncode == 2 and "cannot reach retrieval server at http://127.0.0.1:8000/retrieve" in line
    assert line.endswith("(checked before anything loads; another server: --set tool.search.url=URL)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "server,said",
    [
        ({"delay": 3.0}, "did not answer within its timeout, 0.5 s"),
        ({"reply": b"<html>oops</html>"}, "sent a reply that is not JSON"),
        (
            {"reply": b'{"results": []}'},
            "sent an unexpected reply (KeyError: 'result'); expected {\"result\"",
        ),
        ({"fail_first": 9, "status": 500}, "answered HTTP 500: Internal Server Error"),
    ],
    ids=["slow", "garbage", "wrong-shape", "http-500"],
)
def test_a_broken_server_is_one_line_before_anything_loads(tmp_path, bm25, server, said):
    """The probe: one query, the tool's own timeout, no retry; nothing written, exit 2."""
    with RetrievalServer(bm25, **server) as s:
        done = _run(
            tmp_path, [ANSWER], "--set", f"tool.search.url={s.url}", "--set", "tool.search.timeout=0.5"
        )
        assert len(s.requests) == 1 and s.requests[0]["queries"] == ["srpo-dsl probe"]
    assert done.returncode == 2 and said in _one_line(done) and s.url in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["run", "eval"])
def test_a_server_failing_mid_run_keeps_the_episodes_done(tmp_path, bm25, command):
    """The probe and the first search are answered, then HTTP 500: episode 1 answered at once, episode 2
    searched (served) and then searched again (failed after 3 tries). Episode 1 is written."""
    with RetrievalServer(bm25, fail_after=2, status=500) as s:
        done = _run(tmp_path, [ANSWER, SEARCH, SEARCH], "--set", f"tool.search.url={s.url}", command=command)
    line = _one_line(done)
    assert done.returncode == 2 and "answered HTTP 500: Internal Server Error (3 tries)" in line
    evaluating = " (evaluating search_r1)" if command == "eval" else ""
    assert f", after 1 of 2 episodes{evaluating}; the 1 finished are in {tmp_path / 'out'}" in line
    traces = [json.loads(x) for x in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    assert [t["answer"] for t in traces] == ["Paris"] and len(traces[0]["events"]) == 1
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["episodes"] == 1


def test_set_points_a_shipped_workflow_at_another_server(tmp_path, bm25):
    """search_r1.srpo unchanged; its tool asks the server --set names, and graph.json records it."""
    before = SEARCH_R1.read_text()
    with RetrievalServer(bm25) as s:
        done = _run(
            tmp_path,
            [SEARCH, SEARCH, ANSWER, ANSWER],
            "--set",
            f"tool.search.url={s.url}",
            "--set",
            "tool.search.top_k=2",
        )
        asked = s.requests
    assert done.returncode == 0, done.stderr
    assert [r["queries"] for r in asked] == [["srpo-dsl probe"], ["capital of France", "capital of France"]]
    assert asked[1]["topk"] == 2  # the tool node's top_k follows the setting too
    graph = json.loads((tmp_path / "out" / "graph.json").read_text())
    assert graph["graph"]["tools"]["search"]["options"]["url"] == s.url
    assert SEARCH_R1.read_text() == before


@pytest.mark.parametrize(
    "setting,message",
    [
        (
            "tool.serch.url=http://h:1",
            "setting tool.serch.url=http://h:1: no tool `serch` in the workflow (did you mean `search`?)",
        ),
        (
            "tool.search.ulr=http://h:1",
            "setting tool.search.ulr=http://h:1: the `http` tool `search` has no option `ulr` "
            "(did you mean `url`?; options: timeout, top_k, url)",
        ),
        (
            "tool.search.top_k=0",
            "setting tool.search.top_k=0: top_k: Input should be greater than or equal to 1",
        ),
        ("policy.lm.model=x", "setting policy.lm.model=x: a setting is written tool.NAME.OPTION=VALUE"),
        ("tool.search.url", "--set tool.search.url: expected tool.NAME.OPTION=VALUE"),
    ],
)
def test_a_bad_setting_is_one_line_exit_2(tmp_path, setting, message):
    done = _run(tmp_path, [ANSWER], "--set", setting)
    assert done.returncode == 2 and done.stderr.strip().startswith(f"error: {message}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_train_and_sweep_check_the_server_before_anything_loads(tmp_path):
    url = _free_url()
    done = cli("train", SEARCH_R1, "--out", tmp_path / "t", "--set", f"tool.search.url={url}")
    assert done.returncode == 2 and f"cannot reach retrieval server at {url}" in _one_line(done)
    assert not (tmp_path / "t").exists()
    experiment = tmp_path / "e.toml"
    experiment.write_text(f'seeds = [0]\n[[cell]]\nname = "a"\nworkflow = "{SEARCH_R1}"\n')
    done = cli("sweep", experiment, "--out", tmp_path / "s", "--set", f"tool.search.url={url}")
    assert done.returncode == 2 and f"cannot reach retrieval server at {url}" in _one_line(done)


def test_a_sweep_passes_its_settings_to_every_run(tmp_path):
    exp = Experiment(tmp_path / "e.toml", [Cell("a", SEARCH_R1, {})], [0], None, {}, [])
    command = train_command(exp, Job(exp.cells[0], 0), tmp_path, {"tool.search.url": "http://h:1/retrieve"})
    assert command[-2:] == ["--set", "tool.search.url=http://h:1/retrieve"]


def test_the_python_api_takes_the_same_settings(tmp_path, bm25):
    settings = {"tool.search.url": "http://10.0.0.5:8000/retrieve", "tool.search.top_k": 5}
    wf = srpo_dsl.load(SEARCH_R1, settings=settings)
    assert wf.graph.tools["search"].options["url"] == "http://10.0.0.5:8000/retrieve"
    assert [v.top_k for v in wf.graph.nodes.values() if isinstance(v, ToolNode)] == [5]
    assert wf.settings == settings
    assert wf.graph.hash == srpo_dsl.load(SEARCH_R1).graph.hash  # where the server runs is not the program
    with pytest.raises(srpo_dsl.UsageError, match="no option `ulr`"):
        srpo_dsl.load(SEARCH_R1, settings={"tool.search.ulr": "x"})
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({"researcher": [ANSWER]}))
    with RetrievalServer(bm25, reply=b"[]") as s:
        wf = srpo_dsl.load(SEARCH_R1, settings={"tool.search.url": s.url})
        with pytest.raises(srpo_dsl.UsageError, match="unexpected reply") as err:
            wf.run(backend="scripted", models=str(script), limit=1, progress=False)
    assert err.value.exit_code == 2
