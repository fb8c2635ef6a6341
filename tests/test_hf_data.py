"""Task data read through Hugging Face `datasets` (envs/hf_data.py), fixtures built locally with it."""

from __future__ import annotations

import datasets
import pytest

from srpo_dsl.envs.data import DATASET, load_tasks, open_tasks
from srpo_dsl.envs.hf_data import ArrowTasks
from srpo_dsl.lang import analyze

ROWS = [{"question": f"What is {i}+1?", "answer": i + 1, "id": f"q{i}"} for i in range(5)]
WANT = [{**r, "answer": str(r["answer"]), "answers": [str(r["answer"])]} for r in ROWS]


@pytest.fixture()
def table():
    return datasets.Dataset.from_list(ROWS)


def test_saved_folder_csv_arrow_and_local_name(tmp_path, table):
    table.save_to_disk(str(tmp_path / "saved"))
    table.to_csv(str(tmp_path / "t.csv"), index=False)
    (tmp_path / "local").mkdir()
    table.to_csv(str(tmp_path / "local" / "train.csv"), index=False)
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    for src in ("saved", "t.csv", arrow.name, "hf:/local"):
        path = tmp_path / "saved" / arrow.name if src == arrow.name else tmp_path / src
        if src.startswith("hf:"):
            path = f"hf:{tmp_path}/local"
        tasks = open_tasks(path, kind="math")
        assert isinstance(tasks, ArrowTasks) and list(tasks) == WANT, src


def test_dataset_dict_splits(tmp_path, table):
    datasets.DatasetDict({"train": table, "test": table.select(range(2))}).save_to_disk(str(tmp_path / "dd"))
    data = str(tmp_path / "dd")
    assert len(DATASET({"data": data}, "train", None, None)) == 5
    assert len(DATASET({"data": data, "eval_split": "test"}, "eval", None, None)) == 2
    assert len(DATASET({"data": data}, "train", None, 3)) == 3
    with pytest.raises(ValueError, match=r"dd: no split `validation` \(it has train, test\)"):
        DATASET({"data": data, "split": "validation"}, "train", None, None)


def test_bad_rows_and_sources_are_one_line(tmp_path):
    datasets.Dataset.from_list([{"question": "q", "answer": "1"}, {"question": "q2"}]).save_to_disk(
        str(tmp_path / "s")
    )
    tasks = open_tasks(tmp_path / "s", kind="math")
    assert tasks[0]["answer"] == "1"
    with pytest.raises(ValueError, match=r"s row 1: no answer field"):
        tasks[1]
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match=r"plain: a folder, and not a saved dataset"):
        load_tasks(tmp_path / "plain", kind="math")
    with pytest.raises(ValueError, match=r"hf:nobody/nothing_here_xyz: not in the local `datasets` cache"):
        load_tasks("hf:nobody/nothing_here_xyz", kind="qa")


WORKFLOW = """workflow w
policy lm = builtin("tiny")
task {kind}(data = "{data}")
agent a uses lm prompt "p.j2" emits boxed
aggregate a
reward exact_match(a, task.answer)
train with (group = 2)
"""


def test_validate_knows_a_saved_folder(tmp_path, table):
    """The issue: a save_to_disk folder passed `validate` as a `jsonl` task, then `run` failed."""
    table.save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "p.j2").write_text("Q {{ task.question }}")
    (tmp_path / "plain").mkdir()

    def codes(kind, data):
        path = tmp_path / "w.srpo"
        path.write_text(WORKFLOW.format(kind=kind, data=data))
        return [(d.code, d.message) for d in analyze(path.read_text(), str(path)).diagnostics]

    [(code, message)] = codes("jsonl", "saved")
    assert code == "E107" and "not a saved dataset folder (`dataset(...)` reads any format)" in message
    assert codes("dataset", "saved") == [] and codes("math", "saved") == []
    assert [c for c, _ in codes("math", "plain")] == ["E107"]
    assert codes("math", "missing.jsonl") == []  # data not there yet: the run reports it
