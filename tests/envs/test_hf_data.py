"""Task data read through Hugging Face `datasets` (envs/hf_data.py), fixtures built locally with it."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from srpo_dsl.envs.data import DATASET, load_tasks, open_tasks
from srpo_dsl.envs.hf_data import ArrowTasks
from srpo_dsl.errors import UsageError
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


@pytest.fixture()
def own_cache(tmp_path, monkeypatch):
    """An empty `datasets` cache of this test's own (`load_dataset` caches a local folder under its name)."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    return tmp_path / "hf-cache"


def write_workflow(folder, data, options=""):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "p.j2").write_text("Q {{ task.question }}")
    path = folder / "w.srpo"
    path.write_text(WORKFLOW.replace('data = "{data}"', f'data = "{data}"{options}').format(kind="dataset"))
    return path


def cache_like_the_hub(cache, name, splits):
    """`name` in a real `datasets` cache at `cache`, laid out as `load_dataset` leaves a Hub download
    (NAME/default/VERSION/HASH/NAME-SPLIT.arrow): a packaged JSON builder given the files of each split
    in its own config, prepared once. Nothing is downloaded."""
    from datasets.data_files import DataFilesDict
    from datasets.packaged_modules.json.json import Json, JsonConfig

    source = cache.parent / f"{name}-files"
    source.mkdir()
    for split, rows in splits.items():
        datasets.Dataset.from_list(rows).to_json(str(source / f"{split}.jsonl"))
    files = DataFilesDict.from_patterns({s: [f"{s}.jsonl"] for s in splits}, base_path=str(source))
    builder = type("Cached", (Json,), {"BUILDER_CONFIGS": [JsonConfig(name="default", data_files=files)]})
    builder(cache_dir=str(cache), dataset_name=name, hash="0123456789abcdef").download_and_prepare()


def test_a_name_in_the_local_datasets_cache_offline(tmp_path, own_cache, monkeypatch):
    """`hf:NAME` reads what a real `load_dataset` cache holds under NAME, with the Hub off (HF_DATASETS_OFFLINE=1),
    split by split, through the workflow's own binding and through the API's `data=`."""
    from srpo_dsl.api import load
    from srpo_dsl.runtime.setup import task_data

    cache_like_the_hub(own_cache, "tiny_math", {"train": ROWS, "test": ROWS[:2]})
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # no folder here is named tiny_math: the cache is what is read
    wf = load(write_workflow(tmp_path / "wf", "hf:tiny_math", ', split = "train", eval_split = "test"'))
    assert list(task_data(wf, split="train")) == [{**t, "id": t["id"]} for t in WANT]
    assert [t["question"] for t in task_data(wf, split="eval")] == [r["question"] for r in ROWS[:2]]
    assert wf.render_prompt("a", data="hf:tiny_math") == "Q What is 0+1?"
    other = load(write_workflow(tmp_path / "other", "hf:tiny_math", ', split = "dev"'))
    with pytest.raises(
        ValueError, match=r"^hf:tiny_math\[dev\]: cannot read it with `datasets` \(Unknown split"
    ):
        task_data(other)


def test_a_relative_hf_folder_is_the_workflows_own(tmp_path, own_cache, table, monkeypatch):
    """`hf:FOLDER` in a workflow is resolved against the workflow's folder, as its other paths, whatever
    the working directory; `--data hf:FOLDER` (a path the user types) against the working directory."""
    from srpo_dsl.api import load
    from srpo_dsl.runtime.setup import task_data

    (tmp_path / "wf" / "local").mkdir(parents=True)
    table.to_csv(str(tmp_path / "wf" / "local" / "train.csv"), index=False)
    wf = load(write_workflow(tmp_path / "wf", "hf:local"))
    monkeypatch.chdir(tmp_path / "wf" / "local")  # no `local` here, nor in the cache yet
    with pytest.raises(ValueError, match=r"hf:local: not in the local `datasets` cache, nor a local folder"):
        task_data(wf, data="hf:local")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert [t["question"] for t in task_data(wf)] == [r["question"] for r in ROWS]
    monkeypatch.chdir(tmp_path / "wf")
    assert len(task_data(wf, data="hf:local")) == 5


def anonymous_kb() -> int:
    """This process's resident anonymous memory (heap, not mapped files), in kB."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("RssAnon:")[1].split()[0])


def peak_growth_kb(read) -> int:
    """How far this process's anonymous memory rose above where it was while `read()` ran (sampled)."""
    import threading

    start, peak, done = anonymous_kb(), [0], threading.Event()

    def sample():
        while not done.wait(0.002):
            peak[0] = max(peak[0], anonymous_kb())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        read()
    finally:
        done.set()
        sampler.join()
    return max(peak[0], anonymous_kb()) - start


@pytest.mark.slow  # about 5 s: writing the files
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads RssAnon from /proc")
def test_memory_stays_flat_over_a_large_csv_and_saved_folder(tmp_path, own_cache):
    """A 32 MB CSV (converted into the cache as it is opened) and a 32 MB `save_to_disk` folder, every
    50th row read: the heap grows by less than half their size (a reader that held the table would hold
    at least all of it), after an 8x smaller CSV read the same way (the libraries' first use, and what a
    reader needs whatever the size)."""
    n = 160_000  # rows of ~200 bytes: the CSV reader's chunks (10,000 rows) are a small part of the file
    big = datasets.Dataset.from_dict(
        {"question": [f"{i} " + "x" * 200 for i in range(n)], "answer": range(n)}
    )
    big.to_csv(str(tmp_path / "big.csv"), index=False)
    big.save_to_disk(str(tmp_path / "big"))
    big.select(range(n // 8)).to_csv(str(tmp_path / "small.csv"), index=False)
    del big

    def read(source: Path) -> None:
        rows = open_tasks(source, kind="dataset")[::50]
        assert len(rows) == n // 50 and rows[-1]["answer"] == str(n - 50)

    open_tasks(tmp_path / "small.csv", kind="dataset")[::50]
    for source in (tmp_path / "big.csv", tmp_path / "big"):
        size_kb = sum(p.stat().st_size for p in [source, *source.glob("*.arrow")] if p.is_file()) // 1024
        assert size_kb > 30_000
        assert peak_growth_kb(lambda source=source: read(source)) < size_kb // 2, source.name


def test_the_data_options_name_every_source():
    """`run`/`render`'s and `eval`'s `--data` and `train`'s `--eval-data` help name each form a task's data
    may take."""
    from srpo_dsl.cli import run_cmds, train_cmds
    from srpo_dsl.data_sources import DATASETS_FILES, OWN_FILES

    for option in (run_cmds.DATA, run_cmds.EVAL_DATA, train_cmds.EVAL_DATA):
        for form in (*OWN_FILES, *DATASETS_FILES, "save_to_disk", "hf:NAME", "eval_split"):
            assert form in option.help, form


ROOT = Path(__file__).resolve().parents[2]
REPLIES = str(ROOT / "workflows" / "math_replies.json")


@pytest.mark.slow  # about 10 s alone: the first run, eval and train plan import the libraries
def test_run_evaluate_and_train_take_every_source(tmp_path, own_cache, table, monkeypatch, capsys):
    """A saved folder and a `hf:` name in place of the task's data: `run`, `evaluate` and `train`'s plan
    in Python, `srpo-dsl run --data` and `eval --data`; a folder `save_to_disk` did not write is one line."""
    from srpo_dsl.api import load
    from srpo_dsl.cli.main import main

    table.save_to_disk(str(tmp_path / "saved"))
    cache_like_the_hub(own_cache, "tiny_math", {"train": ROWS, "test": ROWS[:2]})
    monkeypatch.chdir(tmp_path)
    wf, scripted = load(ROOT / "workflows" / "math_fixed.srpo"), {"backend": "scripted", "models": REPLIES}
    for data in ("saved", "hf:tiny_math"):
        assert len(wf.run(data=data, limit=2, progress=False, **scripted).episodes) == 2, data
    ev = wf.evaluate(k=1, data=["saved", "hf:tiny_math"], limit=2, progress=False, **scripted)
    assert len(ev.datasets) == 2
    quickstart = load(ROOT / "workflows" / "quickstart.srpo")
    assert quickstart.plan(tmp_path / "q", eval_data=["saved", "hf:tiny_math"]).setup.eval_data
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match=r"^plain: a folder, and not a saved dataset"):
        quickstart.plan(tmp_path / "q", eval_data=["plain"])
    with pytest.raises(UsageError, match=r"^plain: a folder, and not a saved dataset"):
        quickstart.render_prompt("solver", data="plain")
    for cmd in ("run", "eval"):
        argv = [cmd, str(ROOT / "workflows" / "math_fixed.srpo"), "--data", "hf:tiny_math", "--limit", "1"]
        with pytest.raises(SystemExit) as done:
            main([*argv, "--backend", "scripted", "--model", REPLIES, "--out", f"out-{cmd}"])
        assert done.value.code in (0, None), capsys.readouterr().err
        assert (tmp_path / f"out-{cmd}" / "traces.jsonl").is_file()
    with pytest.raises(SystemExit) as done:
        main(["run", str(ROOT / "workflows" / "math_fixed.srpo"), "--data", "plain", "--backend", "scripted"])
    assert done.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1].startswith("error: plain: a folder, and not a saved dataset")
    )
