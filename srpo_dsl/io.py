"""Files written by every stage: atomic writes (never half-written) and append-only JSON Lines.

Every file and folder written goes through `new_file` or `new_folder`: a new one gets the modes the
user's umask gives (as `open` and `mkdir` do; `tempfile`'s 0600/0700 would hide results from the
user's group; `umask_modes` gives them to what a library wrote), and a file rewritten in place
(`write_atomic`) keeps its mode and, when `path` is a symbolic link, is its target, the link staying a
link. Only a regular file is ever replaced (`check_output_file`): a device, FIFO, socket or folder at
the path (or at a link's target) is refused before anything is written."""

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


KINDS = {  # what a path can name, in words
    stat.S_IFREG: "a regular file",
    stat.S_IFDIR: "a folder",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}
FILE, FOLDER = KINDS[stat.S_IFREG], KINDS[stat.S_IFDIR]


def kind_of(path: Path, follow_links: bool = True) -> str | None:
    """What `path` names, in words (`KINDS`: `a FIFO (named pipe)`, `a symbolic link (to TARGET)`); None
    when nothing is there (or a parent is no folder: writing it says why). `follow_links=False`: a
    symbolic link is itself the answer."""
    try:
        mode = (os.stat if follow_links else os.lstat)(path).st_mode
    except OSError:
        return None
    kind = KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return f"{kind} (to {os.readlink(path)})" if stat.S_ISLNK(mode) else kind


def not_a_file(path: Path, follow_links: bool = True) -> str | None:
    """`it is a FIFO (named pipe), not a regular file` when `path` names something else than a regular
    file; None when it names one or nothing."""
    kind = kind_of(path, follow_links)
    return None if kind in (None, FILE) else f"it is {kind}, not a regular file"


def check_output_file(path: Path, follow_links: bool = True) -> None:
    """`path` may be replaced by a file written whole: a regular file or a new path, else one `WriteError`
    line, before anything is opened (a device or FIFO is never replaced: `-o /dev/null` run as root would
    replace it for the whole machine). `follow_links=False` (a user-named output): a link is refused too,
    its target untouched."""
    problem = not_a_file(path, follow_links)
    if problem is not None:
        raise WriteError(path, f"{problem} (name a new path or a regular file)")


def outermost_missing(path: Path) -> Path | None:
    """The outermost folder `path.mkdir(parents=True)` would make (`path` or an ancestor), None when `path`
    exists: what to remove so that a failed write leaves nothing behind."""
    made = None
    for folder in (Path(path), *Path(path).parents):
        if folder.exists():
            break
        made = folder
    return made


def write_atomic(path: Path, text: str, newline: str | None = None) -> None:
    """Write via a temporary file in the same folder and rename: never half-written (`newline`: as
    `open`'s; "" writes the line endings of `text` as they are)."""
    write_lines_atomic(path, [text], newline)


def write_lines_atomic(path: Path, chunks: Iterable[str], newline: str | None = None) -> None:
    """Write `chunks` in order via a temporary file in the same folder and a rename (a rewritten file keeps
    its mode; a link's target is rewritten, the link stays); a `WriteError` when the disk refuses it (the
    temporary file removed)."""
    path = Path(os.path.realpath(path))
    check_output_file(path)
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


def umask() -> int:
    """This process's umask (read from /proc, which leaves it as it is; else set and set back)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def umask_modes(folder: Path) -> None:
    """Give every file and folder under `folder` (new ones, written by a library that makes them 0600 as
    `tempfile` does: safetensors) the modes the umask gives a new one: 0644 and 0755 under umask 022 (an
    executable file keeps its execute bits' share)."""
    mask = umask()
    for root, dirs, files in os.walk(folder):  # a link is left as it is (its target is not the library's)
        for name in dirs + files:
            entry = os.path.join(root, name)
            mode = os.lstat(entry).st_mode
            if stat.S_ISDIR(mode) or (stat.S_ISREG(mode) and mode & stat.S_IXUSR):
                os.chmod(entry, 0o777 & ~mask)
            elif stat.S_ISREG(mode):
                os.chmod(entry, 0o666 & ~mask)


def write_json(path: Path, data: object) -> None:
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def append_jsonl(path: Path, row: Mapping[str, object]) -> None:
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
