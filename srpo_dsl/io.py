"""Files written by every stage: atomic writes (never half-written) and append-only JSON Lines.

Every file and folder written goes through `new_file` or `new_folder`: a new one gets the modes the
user's umask gives (as `open` and `mkdir` do; `tempfile`'s 0600/0700 would hide results from the
user's group), and a file rewritten in place (`write_atomic`) keeps its mode and, when `path` is a
symbolic link, is its target, the link staying a link."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from srpo_dsl.errors import UsageError, WriteError

FULL = 1 << 20  # bytes: a disk with less free space than this is full, for a writer that does not say so


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """What the block writes is `path`: an `OSError` (a read-only or full disk, no permission), or a
    `WriteError` of a file written under it, is one `WriteError` line naming `path`."""
    try:
        yield
    except WriteError as exc:
        raise WriteError(path, exc.reason) from None
    except OSError as exc:
        raise WriteError(path, exc.strerror or str(exc)) from None


def disk_full(path: Path) -> bool:
    """Whether the disk `path` is (or would be) on has less than `FULL` bytes free: the reason a library
    that reports a failed write in its own words (torch's "unexpected pos") failed."""
    return shutil.disk_usage(nearest_folder(path)).free < FULL


def full_disk_error(path: Path) -> WriteError:
    """The `WriteError` of a full disk, for a writer that did not say so itself."""
    return WriteError(path, os.strerror(errno.ENOSPC))


def nearest_folder(path: Path) -> Path:
    """`path` if it is a folder, else its nearest ancestor that is (where it would be created)."""
    folder = Path(path)
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    return folder


def write_atomic(path: Path, text: str, newline: str | None = None) -> None:
    """Write via a temporary file in the same folder and rename: never half-written (`newline`: as
    `open`'s; "" writes the line endings of `text` as they are)."""
    write_lines_atomic(path, [text], newline)


def write_lines_atomic(path: Path, chunks: Iterable[str], newline: str | None = None) -> None:
    """Write `chunks` in order via a temporary file in the same folder and a rename (a rewritten file keeps
    its mode; a link's target is rewritten, the link stays); a `WriteError` when the disk refuses it (the
    temporary file removed)."""
    path = Path(os.path.realpath(path))
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = new_file(path.parent, f".{path.name}.", ".tmp")
        try:
            if path.exists():
                os.fchmod(fd, stat.S_IMODE(path.stat().st_mode))
            with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as f:
                f.writelines(chunks)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def new_file(folder: Path, prefix: str, suffix: str) -> tuple[int, Path]:
    """A new file of a name no other has in `folder`, opened for writing: (descriptor, path); its mode
    is what the umask leaves of 0666, as for any file `open` creates."""
    path = folder / f"{prefix}{uuid.uuid4().hex[:16]}{suffix}"
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), path


def new_folder(folder: Path, prefix: str) -> Path:
    """A new empty folder of a name no other has in `folder`; its mode is what the umask leaves of 0777."""
    path = folder / f"{prefix}{uuid.uuid4().hex[:16]}"
    path.mkdir()
    return path


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def append_jsonl(path: Path, row: Mapping[str, Any]) -> None:
    """Append one row and flush it to disk (a killed run keeps every row it logged); a `WriteError` when
    the disk refuses it."""
    with writing(path), path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


class _Overflow(ValueError):
    """An integer of a JSON text beyond a float's range (no metric or id srpo-dsl writes is one)."""


def _integer(digits: str) -> int:
    value = int(digits)
    if abs(value) > FLOAT_MAX:
        raise _Overflow(digits)
    return value


FLOAT_MAX = 1.7976931348623157e308  # sys.float_info.max


def loads(text: str) -> Any:
    """`json.loads`, but a text nested deeper than Python's recursion can read, or holding an integer
    beyond a float's range (it would overflow where a number is computed), is a `JSONDecodeError`
    ("nested too deeply", "number too large") like any other bad JSON (docs/cli.md)."""
    try:
        return json.loads(text, parse_int=_integer)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
    except _Overflow:
        raise json.JSONDecodeError("number too large", text, 0) from None


def complete_lines(text: str) -> tuple[list[str], int | None]:
    """The lines of a JSON Lines text but an unfinished last one (a writer killed mid-line: no final
    newline and not valid JSON), and that line's 1-based number (None: the text is whole)."""
    lines = text.splitlines()
    if not lines or text.endswith("\n"):
        return lines, None
    try:
        loads(lines[-1])
    except json.JSONDecodeError:
        return lines[:-1], len(lines)
    return lines, None


def not_utf8(exc: UnicodeDecodeError, start: int = 0) -> str:
    """Why bytes are not text, in words: `not UTF-8 text (byte 0xff at offset 49)`, the offset counted in
    the file (`start`: where the bytes decoded begin in it)."""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {start + exc.start})"


def read_text(path: Path, newline: str | None = None) -> str:
    """A text file's content, or a `UsageError` that says in one line why it cannot be read
    (`newline`: as `open`'s; "" keeps the file's line endings as they are)."""
    try:
        with open(path, encoding="utf-8", newline=newline) as f:
            text = f.read()
    except FileNotFoundError:
        raise UsageError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"cannot read {path}: it is a directory") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {path}: {not_utf8(exc)}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if "\x00" in text:
        raise UsageError(f"cannot read {path}: a binary file (it holds NUL bytes), not text")
    return text
