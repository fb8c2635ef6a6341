"""What a task's `data` names, told from the disk alone: no row is read and no user code runs.

A data source is a file srpo-dsl reads itself (`.jsonl`, `.json`, `.parquet`), a file Hugging Face
`datasets` reads (`DATASETS_FILES`), a folder written by `Dataset.save_to_disk` or
`DatasetDict.save_to_disk`, or `hf:NAME`: what `datasets.load_dataset(NAME)` finds locally (its cache,
or a local folder of data files), offline. The checker (`validate`) and the loaders
(`srpo_dsl.envs.data`) both ask `data_problem`, so a source that passes one is read by the other.
"""

from __future__ import annotations

from pathlib import Path

OWN_FILES = (".jsonl", ".json", ".parquet")  # read by srpo_dsl.envs.data itself, rows positioned
DATASETS_FILES = {".csv": "csv", ".tsv": "csv", ".arrow": "arrow"}  # suffix -> its `datasets` builder
ONE_FILE_TYPE = {"jsonl": ".jsonl", "parquet": ".parquet"}  # task kinds that read only one file type
CACHE_PREFIX = "hf:"  # `data = "hf:NAME"`: `load_dataset(NAME)`, offline
SAVED_DICT, SAVED_ONE = "dataset_dict.json", "state.json"  # what `save_to_disk` writes in its folder


def cache_name(path: str | Path) -> str | None:
    """NAME of a `hf:NAME` source (also once resolved against the workflow's folder), else None. A NAME
    may be an absolute folder (`hf:/data/my_set`: the part `hf:` alone, then the folder's)."""
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if part.startswith(CACHE_PREFIX):
            head = part[len(CACHE_PREFIX) :]
            name = "/".join([head, *parts[i + 1 :]]) if head else "/" + "/".join(parts[i + 1 :])
            return name if name.strip("/") else None
    return None


def cache_target(path: str | Path) -> str | None:
    """What `load_dataset` is given for a `hf:NAME` source (None for another source). A relative NAME
    written in a workflow is resolved against its folder, as every path there: the path holds that
    folder before `hf:`, and when NAME is a folder there, that folder is the target. Else NAME itself: a
    name in the local `datasets` cache, or a folder under the working directory (`--data hf:NAME`)."""
    name = cache_name(path)
    parts = Path(path).parts
    at = next((i for i, part in enumerate(parts) if part.startswith(CACHE_PREFIX)), 0)
    if name is None or name.startswith("/") or at == 0:
        return name
    folder = Path(*parts[:at], name)
    return str(folder) if folder.is_dir() else name


def saved_dataset(path: Path) -> bool:
    """Whether `path` is a folder written by `save_to_disk` (a Dataset's or a DatasetDict's)."""
    return path.is_dir() and ((path / SAVED_DICT).is_file() or (path / SAVED_ONE).is_file())


def supported() -> str:
    return ", ".join([*OWN_FILES, *DATASETS_FILES])


def data_problem(path: Path, kind: str) -> str | None:
    """Why a task of kind `kind` cannot read `path`, one line naming it; None when it can, or when it is
    not there (reading says so then)."""
    want = ONE_FILE_TYPE.get(kind)
    hint = " (`dataset(...)` reads any format)"
    if cache_name(path) is not None:
        return f"{path}: a `{kind}` task reads a {want} file, not a cached dataset{hint}" if want else None
    if path.is_dir():
        if not saved_dataset(path):
            return (
                f"{path}: a folder, and not a saved dataset (no {SAVED_DICT} or {SAVED_ONE} from "
                f"`save_to_disk`); name a data file, or `hf:FOLDER` for `load_dataset`"
            )
        return (
            f"{path}: a `{kind}` task reads a {want} file, not a saved dataset folder{hint}" if want else None
        )
    if want is not None and path.suffix != want:
        return f"{path}: a `{kind}` task reads a {want} file, not {path.suffix or 'no suffix'}{hint}"
    if path.is_file() and path.suffix not in (*OWN_FILES, *DATASETS_FILES):
        return f"{path}: unsupported task file type {path.suffix!r} (use {supported()}, or a saved dataset)"
    return None


def source_problem(path: Path) -> str | None:
    """Why `path`, data given by hand in place of a task's (`--data`, `data=`, `eval_data=`), is not a
    source a task reads, one line; None when it is one (a `hf:` name is looked up when read)."""
    if cache_name(path) is None and not path.exists():
        return f"cannot read {path}: no such file"
    return data_problem(path, "dataset")
