"""A .jsonl task file read lazily: rows parsed when a step asks for them, one read per run, the same
draws and ids as the eager reader, and a bad row's error naming FILE:LINE when it is reached."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from srpo_dsl.envs import lines
from srpo_dsl.envs.data import load_tasks, open_tasks
from srpo_dsl.envs.task_table import JsonlTasks, pick
from srpo_dsl.rl.distributed.data_order import step_prompts
from srpo_dsl.rl.loop.plan import Setup, make_plan
from srpo_dsl.rl.loop.prepare import checked_data
from srpo_dsl.runtime.setup import load_workflow
from tests.support.clitools import cli
from tests.support.training import train_env

# The ids a run with batch 4, seed 3 drew at steps 1, 2, 6, 7 before rows were read lazily (the eager
# reader of git main), for `_file(..., ids=100)` and `_file(..., ids=20)` (ids repeated).
BEFORE = [["q12", "q5", "q22", "q8"], ["q4", "q6", "q19", "q0"], ["q21", "q22", "q14", "q6"]]
BEFORE += [["q18", "q5", "q1", "q16"]]
BEFORE_REPEATED_TAIL = ["q19", "q0@20", "q1@21", "q2@22"]


def _file(path: Path, ids: int = 100) -> Path:
    """23 rows, a blank line after every row i with i % 7 == 3."""
    lines = []
    for i in range(23):
        lines.append(json.dumps({"id": f"q{i % ids}", "question": f"{i}+1", "answer": str(i + 1)}))
        if i % 7 == 3:
            lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def _draws(tasks, steps=(1, 2, 6, 7)) -> list[list[str]]:
    return [[t["id"] for t in pick(tasks, step_prompts(len(tasks), 4, s, 3))] for s in steps]


def test_a_run_draws_the_rows_it_drew_before(tmp_path: Path) -> None:
    tasks = open_tasks(_file(tmp_path / "d.jsonl"), kind="math")
    assert isinstance(tasks, JsonlTasks) and len(tasks) == 23
    assert _draws(tasks) == BEFORE
    assert tasks[5] == {"id": "q5", "question": "5+1", "answer": "6", "answers": ["6"]}
    assert [t["id"] for t in tasks[-3:]] == ["q20", "q21", "q22"] and tasks[-1]["answer"] == "23"


def test_repeated_ids_are_the_eager_readers_in_file_order_and_unique_in_a_step(tmp_path: Path) -> None:
    tasks = open_tasks(_file(tmp_path / "d.jsonl", ids=20), kind="math")
    assert [t["id"] for t in tasks][-4:] == BEFORE_REPEATED_TAIL == [t["id"] for t in tasks[:23]][-4:]
    assert [t["id"] for t in load_tasks(tmp_path / "d.jsonl", kind="math")][-4:] == BEFORE_REPEATED_TAIL
    both = pick(tasks, [21, 1, 5])  # rows 1 and 21 share `q1`: the lower row keeps it
    assert [t["id"] for t in both] == ["q1@21", "q1", "q5"]
    assert [t["id"] for t in pick(tasks, [21, 5])] == ["q1", "q5"]  # alone in its step: no clash


def test_rows_a_run_does_not_use_are_not_parsed(tmp_path: Path) -> None:
    """Row 6 (line 7) is not JSON: opening the file and reading rows 0-4 never reaches it; asking for it
    is the eager reader's error, naming the line."""
    path = _file(tmp_path / "d.jsonl")
    lines = path.read_text().splitlines()
    lines[6] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    tasks = open_tasks(path, kind="math")
    assert len(tasks) == 23 and [t["id"] for t in tasks[:5]] == ["q0", "q1", "q2", "q3", "q4"]
    with pytest.raises(ValueError, match=rf"^{path}:7: invalid JSON \(Expecting property name"):
        tasks[5]
    with pytest.raises(ValueError, match=rf"^{path}:7: invalid JSON"):
        load_tasks(path, kind="math")  # every row read: the same error up front


def test_a_bad_row_names_its_line_when_reached(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"question": "1+1", "answer": "2"}\n\n{"question": "2+2"}\n{"question": "\xff"}\n')
    tasks = open_tasks(path, kind="qa")
    assert len(tasks) == 3 and tasks[0]["answer"] == "2"
    with pytest.raises(ValueError, match=rf"^{path}:3: no answer field"):
        tasks[1]
    with pytest.raises(ValueError, match=rf"^{path}:4: not UTF-8 text \(byte 0xff at offset 70\)"):
        tasks[2]
    assert len(open_tasks(path, kind="jsonl")) == 3  # not strict: row 2 has what it needs
    assert [len(open_tasks(path, kind="qa", limit=n)) for n in (1, 2)] == [1, 2]


@pytest.mark.parametrize("text", ["", "\n \n\t\r\n"])
def test_a_file_without_records_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "d.jsonl").write_text(text)
    with pytest.raises(ValueError, match=r"d\.jsonl: no records"):
        open_tasks(tmp_path / "d.jsonl", kind="math")


def test_a_run_reads_its_task_file_once(tmp_path: Path) -> None:
    """The train split and the held-out rows of one file: one open of it on the way to the first step."""
    _file(tmp_path / "d.jsonl")
    (tmp_path / "w.srpo").write_text(
        'workflow w\npolicy lm = builtin("tiny")\ntask math(data = "d.jsonl")\n'
        'agent a uses lm prompt "p.j2" emits boxed\nact a\nreward exact_match(a, task.answer)\n'
        "train with (batch = 4, eval_size = 3)\n"
    )
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    plan = make_plan(load_workflow(tmp_path / "w.srpo"), tmp_path / "out", setup=Setup(device="cpu"))
    opened: list[str] = []
    recording = [True]  # an audit hook stays for the session: it records only during the call

    def hook(event: str, args: tuple) -> None:
        if event == "open" and recording[0]:
            opened.append(str(args[0]))

    sys.addaudithook(hook)
    try:
        tasks, (held_out,) = checked_data(plan)
    finally:
        recording[0] = False
    reads = [p for p in opened if p.endswith("d.jsonl")]
    assert len(reads) == 1 and isinstance(tasks, JsonlTasks)
    assert [t["id"] for t in held_out.tasks] == ["q0", "q1", "q2"]


@pytest.mark.slow
def test_a_bad_row_drawn_mid_run_stops_it_in_one_line(tmp_path: Path, tiny_random_model: Path) -> None:
    """6 rows, batch 2, seed 0: step 1 draws rows 2 and 4, step 2 rows 1 and 3; row 3 (line 4) is not
    JSON. Step 1 trains and is saved; step 2 stops the run with the row's error, exit 2."""
    rows = [json.dumps({"question": f"{i}+0", "answer": str(i)}) for i in range(6)]
    rows[3] = '{"question": "3+0", '
    (tmp_path / "d.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "p.j2").write_text("{{ task.question }}=")
    (tmp_path / "w.srpo").write_text(
        'workflow w\npolicy lm = hf("model")\ntask math(data = "d.jsonl")\n'
        'agent a uses lm prompt "p.j2" emits text with (max_tokens = 2)\nact a\n'
        "reward exact_match(a, task.answer)\n"
        "train with (group = 2, batch = 2, steps = 2, eval_size = 2, eval_every = 100, save_every = 1)\n"
    )
    out = tmp_path / "out"
    args = ("--model", tiny_random_model, "--device", "cpu", "--out", out)
    result = cli("train", tmp_path / "w.srpo", *args, env=train_env())
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.endswith(
        f"{tmp_path / 'd.jsonl'}:4: invalid JSON (Expecting property name enclosed in double quotes)"
    )
    assert "Traceback" not in result.stderr and (out / "checkpoints" / "step-1").is_dir()


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 4096])
def test_the_line_index_finds_the_lines_python_finds_across_chunks(tmp_path, monkeypatch, chunk) -> None:
    """Lines split across scan chunks, blank and whitespace lines, a missing final newline: the index
    holds the non-blank lines' offsets and line numbers, as splitting the bytes in Python gives them."""
    monkeypatch.setattr(lines, "CHUNK", chunk)
    rng, path = random.Random(chunk), tmp_path / "f.jsonl"
    pieces = ['{"a": 1}', "", "  ", "\r", "x", "{", "\t{}", '{"b": "\u00e9"}', "\u00a0"]
    for _ in range(200):
        text = "\n".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        path.write_bytes((text + rng.choice(["", "\n"])).encode())
        data, expected, at = path.read_bytes(), [], 0
        for number, line in enumerate(data.split(b"\n"), 1):
            if line.decode().strip():
                expected.append((at, number))
            at += len(line) + 1
        index = lines.LineIndex.scan(path)
        assert [(int(index.starts[i]), index.line(i)) for i in range(len(index))] == expected, data


@pytest.mark.parametrize(
    "row", ["[" * 100000 + "]" * 100000, '{"question": "q", "answer": 1' + "0" * 400 + "}"]
)
def test_a_row_too_deep_or_too_large_a_number_is_one_bad_line(tmp_path: Path, row: str) -> None:
    """Python's own reader raised RecursionError (a traceback) on the first; the one reader (`io.loads`)
    makes both bad JSON at the row's line, lazily and in the eager reader alike."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "1+1", "answer": "2"}\n' + row + "\n")
    why = "nested too deeply" if row.startswith("[") else "number too large"
    with pytest.raises(ValueError, match=rf"^{path}:2: invalid JSON \({why}\)$"):
        open_tasks(path, kind="qa")[1]
    with pytest.raises(ValueError, match=rf"^{path}:2: invalid JSON \({why}\)$"):
        load_tasks(path, kind="qa")
