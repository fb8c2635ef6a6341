"""Results folders: the one rule of everything that writes one (docs/cli.md#results-folders).

Results go into a folder that does not exist or is empty. A folder holding anything is refused, before
anything loads, with one line naming the way on: `overwrite` (`--overwrite`: the folder is replaced once
the new results are complete), `resume` (`--resume`: the run it holds goes on), or the same `sweep`
again. Results are written into a temporary sibling folder that replaces the target only when complete.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from srpo_dsl.data_sources import source_problem
from srpo_dsl.errors import UsageError
from srpo_dsl.io import kind_of, nearest_folder, new_folder, writing
from srpo_dsl.runfolder import LOCK, PLAN

SHOWN = 4  # names of a refused folder's entries in its error line
PROBE = ".srpo-dsl-probe-"  # `check_writable`'s passing entry (another rank's, at a launch): no result


def held(folder: Path) -> list[str]:
    """The names of what `folder` holds, sorted; [] when it does not exist. A file there is refused. The
    lock of a run folder's owner is no result (`runlock`: its owner is checked before this), nor the plan
    of its launch, nor the probe of a process checking it meanwhile (the ranks of one launch check it at
    once)."""
    if folder.exists() and not folder.is_dir():  # a file, a device, a FIFO: said what it is
        raise UsageError(f"--out {folder}: it is {kind_of(folder)}, not a folder")
    if not folder.is_dir():
        return []
    names = (p.name for p in folder.iterdir())
    return sorted(name for name in names if name not in (LOCK, PLAN) and not name.startswith(PROBE))


def refuse_existing(folder: Path, advice: str) -> None:
    """`folder` holds files: one line, `FOLDER already exists (a, b, ...): ADVICE`."""
    names = held(folder)
    if names:
        shown = ", ".join(names[:SHOWN]) + (f", ... ({len(names)} entries)" if len(names) > SHOWN else "")
        raise UsageError(f"{folder} already exists ({shown}): {advice}")


def check_writable(out: Path) -> None:
    """`out` can be written (its nearest existing folder takes a new entry): else, before anything loads,
    the `WriteError` the disk gives (a read-only one, no permission)."""
    with writing(out):
        new_folder(nearest_folder(out), PROBE).rmdir()


def check_out(out: Path, overwrite: bool, inputs: Iterable[Path | None] = ()) -> None:
    """The folder of results that replace it: absent or empty, or `overwrite`; never a folder that holds
    the current folder or one of the `inputs` (replacing it would delete them); on a disk that takes it."""
    if not overwrite:
        refuse_existing(out, "pass --overwrite to replace it, or choose another --out")
    else:
        held(out)
        target = out.resolve()
        for path, what in [
            (Path.cwd(), "the current folder"),
            *((p, str(p)) for p in inputs if p is not None),
        ]:
            if target == path.resolve() or target in path.resolve().parents:
                raise UsageError(f"--overwrite: replacing {out} would delete {what}; choose another --out")
    check_writable(out)


@contextmanager
def staged_output(out: Path) -> Iterator[Path]:
    """Write into a temporary sibling folder; it replaces `out` only when everything succeeded (a folder
    replaced keeps its mode; a link to a folder stays, its target is replaced). A disk that refuses it is
    one `WriteError` naming `out` (the temporary folder removed)."""
    out = Path(os.path.realpath(out))
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = new_folder(out.parent, f".{out.name}.partial-")
    try:
        with writing(out):
            yield stage
            if out.exists():
                stage.chmod(stat.S_IMODE(out.stat().st_mode))
                shutil.rmtree(out)
            stage.rename(out)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def check_sources(paths: Iterable[Path | None]) -> None:
    """Every task data source given by hand (`None`: not given) is one a task reads: a data file, a
    `save_to_disk` folder or a `hf:` name (`data_sources.source_problem`)."""
    for path in paths:
        problem = None if path is None else source_problem(Path(path))
        if problem is not None:
            raise UsageError(problem)


def check_files(paths: Iterable[Path | None]) -> None:
    """Every input file exists (`None`: not given)."""
    for path in paths:
        if path is not None and not Path(path).is_file():
            path = Path(path)
            raise UsageError(
                f"cannot read {path}: {'it is a directory' if path.is_dir() else 'no such file'}"
            )
