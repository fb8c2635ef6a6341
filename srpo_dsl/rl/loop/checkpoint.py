"""Checkpoints: an atomic `OUT/checkpoints/step-N` folder per save (engines, RNG states, run state)."""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import torch

from srpo_dsl.errors import UsageError
from srpo_dsl.io import disk_full, full_disk_error, write_json, writing
from srpo_dsl.rl.distributed.process_group import Dist, barrier
from srpo_dsl.rl.engines.policies import TrainingPolicy, engine_owners
from srpo_dsl.runfolder import CHECKPOINTS, checkpoint_folder, checkpoint_folders

ENGINE_TAG = "state"  # the tag each engine is saved under, in step-N/<engine owner>/
RESUMABLE = ("backend", "decode")  # config keys a resume may change
RESUMABLE_OPTIONS = ("steps", "rollout_workers", "report_to")  # `train` options a resume may change
# What torch.load raises for a file a failing disk truncated, garbled or cannot read: a zip without its
# directory (RuntimeError: "PytorchStreamReader failed ..."; OSError: "Invalid argument"), bytes that are
# no pickle, a pickle cut short, a read error.
UNREADABLE = (RuntimeError, OSError, pickle.UnpicklingError, EOFError, ValueError, zipfile.BadZipFile)


def latest_checkpoint(out: Path) -> Path | None:
    """The highest complete `step-N` folder (temporary `.step-N.tmp` folders are never complete)."""
    found = checkpoint_folders(out)
    return found[-1] if found else None


def rng_state() -> dict[str, object]:
    state: dict[str, object] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    out: Path,
    step: int,
    policies: Mapping[str, TrainingPolicy],
    state: Mapping[str, object],
    dist: Dist,
    rank_state: Mapping[str, object] | None = None,
) -> Path:
    """Write OUT/checkpoints/step-N atomically: a temporary folder, renamed once every rank is done.
    `rank_state`: objects of this rank's own, each saved as NAME-rankR.pt (`read_rank_state`). A disk
    that refuses it (read-only, full) is one `WriteError` naming the checkpoint, the temporary folder
    removed."""
    final = checkpoint_folder(out, step)
    tmp = out / CHECKPOINTS / f".step-{step}.tmp"
    with removed_on_failure(tmp, final):
        if dist.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        barrier()
        save_engines(policies, tmp)
        torch.save(rng_state(), tmp / f"rng-rank{dist.rank}.pt")
        for name, value in (rank_state or {}).items():
            torch.save(value, tmp / f"{name}-rank{dist.rank}.pt")
        barrier()
        if dist.rank == 0:
            write_json(tmp / "state.json", state)
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
    barrier()
    return final


@contextmanager
def removed_on_failure(tmp: Path, final: Path) -> Iterator[None]:
    """`tmp` (and the checkpoints folder, if left empty) removed if the block fails; a write the disk
    refused as a `WriteError` naming `final`: an `OSError`, or torch's own error for a short write
    (`unexpected pos`) on a full disk."""
    try:
        with writing(final):
            yield
    except BaseException as exc:
        full = isinstance(exc, RuntimeError) and disk_full(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        with suppress(OSError):
            tmp.parent.rmdir()  # only if empty: the run's first checkpoint
        if full:
            raise full_disk_error(final) from None
        raise


def read_state(folder: Path) -> dict[str, Any]:
    """The run state a checkpoint was written with (step, data cursor, config, policy versions)."""
    return json.loads((folder / "state.json").read_text(encoding="utf-8"))


def read_rank_state(folder: Path, name: str, rank: int, default: Any = None) -> Any:
    """What `save_checkpoint` saved as `name` for `rank` (`default` when it saved none)."""
    path = folder / f"{name}-rank{rank}.pt"
    return read_saved(path) if path.exists() else default


def read_saved(path: Path) -> Any:
    """What `torch.save` wrote to `path`; a file that cannot be read back (truncated, garbled) is one
    `UsageError` naming it."""
    try:
        return torch.load(path, weights_only=False)
    except UNREADABLE as exc:
        raise unreadable(path, exc) from None


def unreadable(path: Path, exc: BaseException) -> UsageError:
    reason = (str(exc).splitlines() or [""])[0].split(". This is an internal")[0] or type(exc).__name__
    return UsageError(f"cannot resume from {path}: cannot read it back ({type(exc).__name__}: {reason})")


def save_engines(policies: Mapping[str, TrainingPolicy], folder: Path) -> None:
    """Every engine's module, optimizer and scheduler state under folder/<owner> (collective)."""
    for owner, p in engine_owners(policies).items():
        p.trained_engine.save_checkpoint(str(folder / owner), tag=ENGINE_TAG, save_latest=False)


def load_engines(policies: Mapping[str, TrainingPolicy], folder: Path) -> None:
    """Every engine's state from folder/<owner>; a state file that cannot be read back is one line."""
    for owner, p in engine_owners(policies).items():
        try:
            path, _ = p.trained_engine.load_checkpoint(str(folder / owner), tag=ENGINE_TAG)
        except torch.cuda.OutOfMemoryError:  # a RuntimeError too: said as the machine's, not the file's
            raise
        except UNREADABLE as exc:
            raise unreadable(damaged_file(folder / owner / ENGINE_TAG), exc) from None
        if path is None:
            raise ValueError(f"checkpoint {folder} holds no state for policy `{owner}`")


def damaged_file(folder: Path) -> Path:
    """The first `.pt` file in `folder` that is not a whole zip archive (torch.save's format; a truncated
    one has lost its directory at the end), else `folder` itself."""
    for path in sorted(folder.glob("*.pt")):
        try:
            zipfile.ZipFile(path).close()
        except (zipfile.BadZipFile, OSError):
            return path
    return folder


def resume_changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[tuple[str, object, object]]:
    """(key, value then, value now) of every run config key (and `options`' key) whose value differs
    between a checkpoint's run and this one, either way: a key only one side has differs (`eval_data`
    given then left out). File paths are compared resolved (`./w.srpo` is `w.srpo`). `backend`, `decode`,
    `steps`, `rollout_workers` and `report_to` may change."""
    changed = [
        (k, before.get(k), now.get(k))
        for k in _union(before, now)
        if k not in ("options", *RESUMABLE) and _comparable(k, before.get(k)) != _comparable(k, now.get(k))
    ]
    was, will = before.get("options", {}), now.get("options", {})
    return changed + [
        (k, was.get(k), will.get(k))
        for k in _union(was, will)
        if k not in RESUMABLE_OPTIONS and was.get(k) != will.get(k)
    ]


def describe_changes(changes: list[tuple[str, object, object]]) -> str:
    """`lr was 0.0004, now 0.5; eval_data was [...], now not given`: what a refused resume says."""
    return "; ".join(f"{key} was {_shown(then)}, now {_shown(now)}" for key, then, now in changes)


def _shown(value: object, limit: int = 160) -> str:
    """A config value on one line, at most `limit` characters (`not given` for a key left out)."""
    if value is None:
        return "not given"
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _union(one: Mapping[str, object], other: Mapping[str, object]) -> list[str]:
    return [*other, *(k for k in one if k not in other)]


def _comparable(key: str, value: Any) -> Any:
    """`value` with its file paths resolved: the workflow, held-out files, and models that are local."""
    if value is None:
        return None
    if key == "workflow":
        return str(Path(value).resolve())
    if key == "eval_data":
        return [str(Path(p).resolve()) for p in value]
    if key == "models":
        return {n: str(Path(m).resolve()) if Path(m).exists() else m for n, m in value.items()}
    return value


def load_checkpoint(folder: Path, policies: Mapping[str, TrainingPolicy], dist: Dist) -> None:
    """Engine states and this rank's RNG states (`read_state` gives the run state)."""
    load_engines(policies, folder)
    set_rng_state(read_saved(folder / f"rng-rank{dist.rank}.pt"))
