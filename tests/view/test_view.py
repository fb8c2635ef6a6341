"""`srpo-dsl view` without a browser: the page's data, the graph layout, bad input, the update fields of
the traces. The page in a real browser: test_view_browser.py."""

import json
import time
from pathlib import Path

import pytest
import torch

from srpo_dsl.rl.loop.event_updates import event_updates
from srpo_dsl.runtime.traces import EventUpdate, TraceError, read_partial_traces, read_traces
from srpo_dsl.view.episodes import highlight
from tests.support.clitools import cli
from tests.support.training import train_env
from tests.support.viewtools import as_training_run, many_episodes, page_json, scripted_run, traces_of


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_run(tmp_path_factory.mktemp("view"))


def test_highlight_finds_the_last_occurrence_of_the_parsed_value() -> None:
    assert highlight("4 + 4 = \\boxed{4}", "4") == [15, 16]
    assert highlight("<route>1, 3</route>", (1, 3)) == [7, 11]
    assert highlight("<route>1,3</route>", [1, 3]) == [7, 10]
    assert highlight("<verify>approve</verify>", "approve") == [8, 15]
    assert highlight("no answer", None) is None
    assert highlight("\\boxed{ 12 }", "13") is None


def test_event_updates_per_event_in_member_order() -> None:
    """srpo: the event's one clipping unit sits on its first row; grpo-like rows: tokens per row."""
    members = [("a/e1", 1), ("a/e1", 0), ("a/e2", 0), ("b/e1", 0), ("b/e1", 1)]
    advantages = torch.tensor([0.5, 0.5, -1.0, 0.25, -0.75])
    clips = torch.tensor([[0, 0], [1, 1], [0, 1], [3, 10], [1, 6]], dtype=torch.float64)
    got = event_updates(members, advantages, clips)
    assert got == {
        "a/e1": EventUpdate(advantages=[0.5, 0.5], clip_fraction=1.0),
        "a/e2": EventUpdate(advantages=[-1.0], clip_fraction=0.0),
        "b/e1": EventUpdate(advantages=[0.25, -0.75], clip_fraction=4 / 16),
    }
    assert event_updates([("c/e1", 0)], torch.tensor([0.0]), torch.zeros(1, 2))["c/e1"].clip_fraction is None


def test_update_fields_round_trip_and_stay_out_of_rollout_traces(run: Path, tmp_path: Path) -> None:
    assert all("update" not in e for ep in traces_of(run) for e in ep["events"])
    training = as_training_run(run, tmp_path / "t")
    (first, *_) = read_traces(training / "traces.jsonl")
    assert first.events[1].update == EventUpdate(advantages=[0.25, 0.25], clip_fraction=1.0)
    again = json.loads(first.model_dump_line())
    assert again["events"][1]["update"] == {"advantages": [0.25, 0.25], "clip_fraction": 1.0}


def test_view_embeds_every_episode_with_its_transitions_and_highlights(run: Path) -> None:
    done = cli("view", run, env=train_env())
    assert done.returncode == 0, done.stderr
    html = (run / "view.html").read_text()
    assert f"{len(html.encode())} bytes), 6 episodes, 27 events" in done.stdout
    assert (
        "<script src" not in html
        and "<link" not in html
        and "http" not in html.lower().replace("http-equiv", "")
    )  # nothing fetched
    data = page_json(html)
    assert [len(ep["events"]) for ep in data["episodes"]] == [len(ep["events"]) for ep in traces_of(run)]
    first = data["episodes"][0]["events"]
    assert first[0]["members"][0]["hl"] == [7, 10]  # <route>1,3</route>
    assert [m["text"][slice(*m["hl"])] for m in first[1]["members"]] == ["4", "5"]
    assert first[0]["next"] == "→ parallel solver by router (when router != STOP)"
    assert first[2]["next"] == "→ route router (when verifier != approve and loop < 4)"
    assert first[-1]["next"] == "→ end"
    assert data["eventTypes"] == [
        "route:router",
        "parallel:solver",
        "verify:verifier",
        "aggregate:aggregator",
    ]


def test_graph_layers_and_back_edges(run: Path) -> None:
    from srpo_dsl.lang.compile.graph_formats import from_json
    from srpo_dsl.view.graph_svg import graph_svg, layers

    graph = from_json((run / "graph.json").read_text())
    assert layers(graph) == {"start": 0, "n1": 1, "n2": 2, "n3": 3, "n4": 4, "end": 5}
    svg = graph_svg(graph, {"route:router": 7})
    assert svg.count('class="edge"') == graph.number_of_edges() == 7
    assert svg.count(" C") == 2  # the loop back to the router and the STOP edge over two layers: arcs
    assert "n1: route:router, 7 events in these traces" in svg
    assert svg.count("data-event-type=") == 4


def test_a_run_without_its_workflow_still_shows_its_graph(run: Path, tmp_path: Path) -> None:
    training = as_training_run(run, tmp_path / "t")  # config.json names a workflow that is gone
    done = cli("view", training, "-o", tmp_path / "page.html", env=train_env())
    assert done.returncode == 0 and done.stderr == ""
    html = (tmp_path / "page.html").read_text()
    assert html.count('class="chart"') == 3  # return and task score, held-out, the per-role invalid rate
    assert "Held-out Avg@4 / Pass@4 (%)" in html and 'data-event-type="parallel:solver"' in html
    assert page_json(html)["objective"] == "srpo"
    (training / "graph.json").unlink()
    done = cli("view", training, "-o", tmp_path / "page.html", env=train_env())
    assert (
        done.stderr
        == "note: no event graph recorded with these traces (pass --workflow FILE.srpo to show it)\n"
    )
    done = cli(
        "view",
        training,
        "-o",
        tmp_path / "page.html",
        "--workflow",
        "workflows/quickstart.srpo",
        env=train_env(),
    )
    assert "the graph of workflows/quickstart.srpo has hash" in done.stderr
    done = cli(
        "view",
        training,
        "-o",
        tmp_path / "page.html",
        "--workflow",
        "workflows/math_routed.srpo",
        env=train_env(),
    )
    assert done.returncode == 0 and done.stderr == ""


@pytest.mark.parametrize(
    ("config", "graph", "note"),
    [
        ({"workflow": 5}, False, "no event graph recorded with these traces"),  # not a path: not read
        ({"workflow": "gone.srpo", "options": [1]}, True, None),  # options not an object: no objective
    ],
)
def test_a_config_of_other_types_is_shown_without_its_settings(
    run: Path, tmp_path: Path, config: dict, graph: bool, note: str | None
) -> None:
    from srpo_dsl.view.page import page_data
    from srpo_dsl.view.source import load_source

    (tmp_path / "traces.jsonl").write_text((run / "traces.jsonl").read_text())
    if graph:
        (tmp_path / "graph.json").write_text((run / "graph.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    source = load_source(tmp_path)
    assert (source.graph is not None) == graph
    assert [n for n in source.notes if note and note in n] == ([source.notes[0]] if note else [])
    assert page_data(source)["objective"] is None


def test_a_cut_last_line_shows_the_complete_episodes_with_a_note(run: Path, tmp_path: Path) -> None:
    text = (run / "traces.jsonl").read_text()
    cut = tmp_path / "traces.jsonl"
    cut.write_text(text[: len(text) - 40])  # killed while writing the 6th episode
    partial = read_partial_traces(cut)
    assert (len(partial.episodes), partial.cut_line) == (5, 6)
    with pytest.raises(TraceError, match=r"traces.jsonl:6: invalid JSON"):
        read_traces(cut)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "return": 0.5, "task_score": 0.5}\n{"step": 2, "re')
    done = cli("view", cut, env=train_env())
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "note: traces.jsonl: line 6 is unfinished (its writer was stopped); showing the 5 complete episodes before it",
        "note: metrics.jsonl: line 2 is unfinished (the run was stopped mid-step); left out",
        "note: no event graph recorded with these traces (pass --workflow FILE.srpo to show it)",
    ]
    html = (tmp_path / "traces.html").read_text()
    assert len(page_json(html)["episodes"]) == 5 and "line 6 is unfinished" in html


@pytest.mark.parametrize(
    ("make", "code", "message"),
    [
        (lambda p: None, 2, "error: cannot read {p}: no such file or folder"),
        (lambda p: p.write_text(""), 1, "error: {p}: no episode (an empty or truncated traces file)"),
        (
            lambda p: p.write_text('{"schema": "srpo-tr'),
            1,
            "error: {p}: only an unfinished line 1 (an empty or truncated traces file)",
        ),
        (
            lambda p: p.write_text('{"schema": "srpo-trace/9", "episode_id": "x"}\n'),
            1,
            "error: {p}:1: schema 'srpo-trace/9' is not one of srpo-trace/1, srpo-trace/2, srpo-trace/3, srpo-trace/4 "
            "(written by another version of srpo-dsl?)",
        ),
        (
            lambda p: p.write_text('{"schema": "srpo-trace/1"}\n'),
            1,
            "error: {p}:1: episode_id: Field required",
        ),
        (
            lambda p: p.write_text("[1]\n{}"),
            1,
            "error: {p}:1: schema 'list' is not one of srpo-trace/1, srpo-trace/2, srpo-trace/3, srpo-trace/4 "
            "(written by another version of srpo-dsl?)",
        ),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, make, code: int, message: str) -> None:
    path = tmp_path / "traces.jsonl"
    make(path)
    done = cli("view", path, env=train_env())
    assert (done.returncode, done.stderr, done.stdout) == (code, message.format(p=path) + "\n", "")
    assert not (tmp_path / "traces.html").exists()


def test_a_folder_without_traces_is_one_line(tmp_path: Path) -> None:
    done = cli("view", tmp_path, env=train_env())
    assert done.returncode == 1
    assert (
        done.stderr
        == f"error: {tmp_path}: no traces.jsonl in it (a training run writes it at its first checkpoint)\n"
    )


@pytest.mark.slow
def test_ten_thousand_episodes_build_in_seconds(run: Path, tmp_path: Path) -> None:
    from srpo_dsl.view.page import render_page
    from srpo_dsl.view.source import load_source

    big = many_episodes(run, tmp_path / "big", 10_000)
    start = time.perf_counter()
    html = render_page(load_source(big), "big")
    seconds = time.perf_counter() - start
    assert len(page_json(html)["episodes"]) == 10_000
    assert seconds < 30, f"{seconds:.1f} s"
    assert len(html.encode()) < 30 * 2**20
