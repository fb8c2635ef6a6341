"""Tasks read through Hugging Face `datasets`: a CSV/TSV or Arrow file, a `save_to_disk` folder, or a
`hf:NAME` source (`load_dataset(NAME)`, offline: its local cache, or a local folder of data files).

`datasets` keeps a table as memory-mapped Arrow (a file's converted once into its cache; an Arrow file
or a saved folder mapped where it lies), so memory stays flat however large the data: `ArrowTasks`
reads row i from the map when asked for, normalizes it (the `normalize` it was given) and keeps nothing.
A bad row is a ValueError naming `SOURCE row i`, raised when that row is first asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from srpo_dsl.data_sources import DATASETS_FILES, SAVED_DICT, cache_name, cache_target
from srpo_dsl.envs.task_table import LazyTasks, Normalize

ONE_SPLIT = "train"  # what `datasets` names the one split of a data file


class Table(Protocol):
    """A `datasets.Dataset` as the tasks read it: its rows, and row i as a dict of column values."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> dict[str, object]: ...


class ArrowTasks(LazyTasks):
    """The rows of a `datasets.Dataset` (`label` names it in errors), row i normalized on `self[i]`."""

    def __init__(
        self,
        table: Table,
        label: str,
        normalize: Normalize,
        size_check: Callable[[str, object], None],
        limit: int | None,
    ):
        self.table, self.label, self.normalize, self.size_check = table, label, normalize, size_check
        self.rows = len(table) if limit is None else min(limit, len(table))

    def __len__(self) -> int:
        return self.rows

    def row(self, i: int) -> dict:
        where = f"{self.label} row {i}"
        record = self.table[i]
        self.size_check(where, record)
        return self.normalize(record, i, where)


class UnusableSource(ValueError):
    """A source read but not usable (no such split): its message is already the one line to show."""


def open_dataset(path: Path, split: str) -> tuple[Table, str]:
    """(the memory-mapped `datasets.Dataset` of `split`, how errors name it) for a source `data_sources`
    accepts (a data file is one split: `split` picks within a DatasetDict folder or a `hf:` source);
    ValueError with one line when it cannot be read or has no such split."""
    name = cache_name(path)
    label = f"hf:{name}[{split}]" if name is not None else str(path)
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # a CSV's conversion to Arrow draws bars: the run prints its own lines
    try:
        return _load(path, name, split), label
    except (FileNotFoundError, UnusableSource):
        raise
    except Exception as exc:  # datasets' and pyarrow's own errors: one line naming the source
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{label}: cannot read it with `datasets` ({reason})") from None
    finally:
        if not quiet:
            enable_progress_bars()


def _load(path: Path, name: str | None, split: str) -> Table:
    import datasets

    if name is not None:
        return _offline_load(datasets, name, cache_target(path) or name, split)
    if path.is_dir():
        return _pick(datasets.load_from_disk(str(path), keep_in_memory=False), path, split)
    if path.suffix == ".arrow":
        return datasets.Dataset.from_file(str(path))
    sep = {"sep": "\t"} if path.suffix == ".tsv" else {}
    return datasets.load_dataset(DATASETS_FILES[path.suffix], data_files=str(path), split=ONE_SPLIT, **sep)


def _pick(table: Any, path: Path, split: str) -> Table:  # (`datasets` is untyped: a Dataset or its Dict)
    """The split `split` of a DatasetDict folder; a Dataset folder is its one split, whatever it is named."""
    if not (path / SAVED_DICT).is_file():
        return table
    if split not in table:
        raise UnusableSource(f"{path}: no split `{split}` (it has {', '.join(table)})")
    return table[split]


def _offline_load(datasets: ModuleType, name: str, target: str, split: str) -> Table:
    """`load_dataset(target, split=split)` with the Hub off (`target`: `hf:name`'s folder or name, as
    `cache_target` tells): only what is on this machine is read."""
    config, was = datasets.config, datasets.config.HF_HUB_OFFLINE
    config.HF_HUB_OFFLINE = True
    try:
        return datasets.load_dataset(target, split=split)
    except (FileNotFoundError, ConnectionError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnusableSource(
            f"hf:{name}: not in the local `datasets` cache, nor a local folder ({reason})"
        ) from None
    finally:
        config.HF_HUB_OFFLINE = was
