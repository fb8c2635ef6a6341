"""The user's Python at run time: imported once per process, called under a time limit, its
failures reported as one line naming the user's file:line, the function and the input.

User code may not end the process: a `SystemExit` it raises (`sys.exit(0)` too) is such a failure,
and so is a `KeyboardInterrupt` it raises itself; one that a signal raised while it ran (Ctrl-C,
SIGTERM, SIGHUP) stays an interrupt (`srpo_dsl.stopping`). What it prints goes to stderr, also while
the libraries' stdout is hidden (`api.quiet`): stdout holds results (`--format json`), never the
user's prints.

Only `run`, `eval`, `train` (and the Python API behind them) come here; `validate` and
`compile` read the same references with `ast` only (`srpo_dsl.lang.usercode.pycode`).

Time limits use `SIGALRM` (`signal.setitimer`), so they hold in the main thread, where every
command runs its workflow; called from another thread, user code runs without one. A limit
interrupts Python code, not a C call in progress: such a call is stopped when it returns.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import io
import math
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from types import FrameType, ModuleType
from typing import TypeGuard

from srpo_dsl.errors import InputError
from srpo_dsl.lang.usercode.pycode import USES, CodeRef, Params, call_problem
from srpo_dsl.stopping import from_signal, signalled_interrupts

# Seconds per call; a tool sets its own.
TIME_LIMITS = {"reward": 60.0, "scorer": 60.0, "parser": 10.0, "loader": 600.0}
IMPORT_TIME_LIMIT = 600.0
_MODULES: dict[str, ModuleType] = {}  # file path or module name -> the module: imported once per process


class UserCodeError(InputError):
    """User code that failed, hung or returned the wrong thing: `FILE:LINE: message`, one line.
    `file` and `line` (None: the file as a whole) name where, in the user's code."""

    def __init__(self, file: str, line: int | None, message: str):
        super().__init__(f"{file}:{line}: {message}" if line is not None else f"{file}: {message}")
        self.file, self.line, self.message = file, line, message

    def __reduce__(self) -> tuple[type, tuple[str, int | None, str]]:  # pickles across processes
        return (UserCodeError, (self.file, self.line, self.message))


class UserTimeout(BaseException):
    """Raised inside user code when its time is up (a BaseException: `except Exception` lets it pass)."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise `UserTimeout` in the code of the block after `seconds` (main thread only)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise UserTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def shorten(value: object, limit: int = 80) -> str:
    """`repr(value)`, cut to `limit` characters: messages stay one short line."""
    text = repr(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def user_line(exc: BaseException, file: str) -> int | None:
    """The line of `file` where `exc` was raised (its deepest frame in that file)."""
    target = os.path.realpath(file)
    if isinstance(exc, SyntaxError) and exc.filename and os.path.realpath(exc.filename) == target:
        return exc.lineno
    lines = [
        f.lineno for f in traceback.extract_tb(exc.__traceback__) if os.path.realpath(f.filename) == target
    ]
    return lines[-1] if lines else None


def _failure(ref: CodeRef, exc: BaseException, what: str) -> UserCodeError:
    """`FILE:LINE: what: ExceptionType: message`, LINE where `exc` left the user's file (a time-out: where
    the code was when its time was up)."""
    line = user_line(exc, ref.file) or ref.line
    if isinstance(exc, UserTimeout):
        return UserCodeError(ref.file, line, what)
    reason = f"{type(exc).__name__}: {exc}".rstrip(": ").replace("\n", " ")
    if isinstance(exc, SystemExit):
        reason = f"SystemExit({exc.code!r}): user code may not end the process, raise an exception instead"
    return UserCodeError(ref.file, line, f"{what}: {reason}")


class UserLines(io.TextIOBase):
    """User code's stdout: whole lines to stderr, above srpo-dsl's progress bars (`tqdm.write`)."""

    def __init__(self) -> None:
        self.pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        from tqdm import tqdm  # type: ignore[import-untyped]  # tqdm ships no type stubs

        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            tqdm.write(line, file=sys.stderr)
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.write("\n")


@contextmanager
def user_output() -> Iterator[None]:
    """What user code prints goes to stderr (`print` writes to `sys.stdout`: hidden, or results)."""
    lines = UserLines()
    try:
        with redirect_stdout(lines):
            yield
    finally:
        lines.flush()


def import_module(ref: CodeRef) -> ModuleType:
    """The module of `ref`, imported on first use (a file by its path, a module by its name)."""
    key = ref.module or os.path.realpath(ref.file)
    if key in _MODULES:
        return _MODULES[key]
    with signalled_interrupts() as arrived:
        try:
            with time_limit(IMPORT_TIME_LIMIT), user_output():
                module = importlib.import_module(ref.module) if ref.module else _exec_file(Path(ref.file))
        except UserTimeout as exc:
            raise _failure(ref, exc, f"importing it did not finish within {IMPORT_TIME_LIMIT:g} s") from None
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            if isinstance(exc, KeyboardInterrupt) and from_signal(exc, arrived):
                raise
            raise _failure(ref, exc, "importing it failed") from None
    _MODULES[key] = module
    return module


def _exec_file(path: Path) -> ModuleType:
    """Import a .py file under a name of its own (so its classes pickle and its dataclasses work)."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
    name = f"srpo_user_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@dataclass(frozen=True)
class UserFunction:
    """A user function ready to call: `fn(*args, about=...)` with its time limit and clear failures."""

    ref: CodeRef
    fn: Callable[..., object]
    timeout: float | None
    arity: int  # positional arguments it takes (a reward, a scorer: 2, or 3 with the episode)

    def __call__(self, *args: object, about: Callable[[], str], **kwargs: object) -> object:
        name = f"{self.ref.function}()"
        with signalled_interrupts() as arrived:
            try:
                with time_limit(self.timeout), user_output():
                    return self.fn(*args, **kwargs)
            except UserTimeout as exc:
                raise _failure(
                    self.ref, exc, f"{name} did not return within {self.timeout:g} s on {about()}"
                ) from None
            except (Exception, SystemExit, KeyboardInterrupt) as exc:
                if isinstance(exc, KeyboardInterrupt) and from_signal(exc, arrived):
                    raise  # a Ctrl-C (or SIGTERM) while it ran: the command's interrupt
                raise _failure(self.ref, exc, f"{name} raised on {about()}") from None

    def fail(self, message: str) -> UserCodeError:
        """An error about what the function returned, at its `def` line."""
        return UserCodeError(self.ref.file, self.ref.line, f"{self.ref.function}() {message}")


def load_function(ref: CodeRef, timeout: float | None = None, options: tuple[str, ...] = ()) -> UserFunction:
    """Import `ref`'s module (once per process), find its function, check the call it will get."""
    fn = getattr(import_module(ref), ref.function, None)
    if fn is None or not callable(fn):
        what = "is not defined" if fn is None else f"is a {type(fn).__name__}, not a function"
        raise UserCodeError(ref.file, None, f"`{ref.function}` {what} after importing it")
    try:
        params = Params.of_callable(fn)
    except (TypeError, ValueError):  # no signature to read (some built-ins): call it as documented
        arity = USES[ref.use].positional
    else:
        problem = call_problem(ref.use, params, options)
        if problem:
            shape = USES[ref.use].shape
            raise UserCodeError(
                ref.file, ref.line, f"{ref.function}() cannot be called as {shape}: {problem}"
            )
        arity = USES[ref.use].arity(params)
    limit = timeout if timeout is not None else TIME_LIMITS.get(ref.use)
    return UserFunction(ref, fn, limit, arity)


def seconds_option(options: Mapping[str, object]) -> float:
    """The `timeout` option of a Python tool or an environment: seconds per call (a number > 0)."""
    seconds = options["timeout"]
    if not isinstance(seconds, (int, float)):
        raise TypeError(f"the timeout option is {shorten(seconds)}, not a number of seconds")
    return seconds


def finite_number(value: object) -> TypeGuard[Real]:
    return isinstance(value, Real) and math.isfinite(float(value))


def json_value(value: object, depth: int = 0) -> bool:
    """Whether `value` is plain JSON data (str, number, bool, None, lists and str-keyed dicts of them)."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if depth > 32:
        return False
    if isinstance(value, (list, tuple)):
        return all(json_value(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_value(v, depth + 1) for k, v in value.items())
    return False
