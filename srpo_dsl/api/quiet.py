"""The one rule for the libraries' output while srpo-dsl runs a workflow: hidden unless asked for."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout, suppress

QUIET_ENV = {  # read by the libraries when they are imported
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights", "Writing model shards"
    "WANDB_SILENT": "true",  # W&B's "Tracking run with wandb ..." (a tracker of `report_to`)
}
LIBRARIES = (
    r"(torch|transformers|deepspeed|accelerate|huggingface_hub|peft|safetensors|tokenizers|wandb|mlflow|tqdm"
    r"|srpo_dsl)"
    r"(\.|$)"
)


@contextmanager
def libraries_quiet(enabled: bool) -> Iterator[None]:
    """Hide the libraries' progress bars, INFO/WARNING logs, warnings and stdout for the block.

    The one rule of every command and API call that loads them (`run`, `eval`, `train`, `export`,
    `compile`): hidden unless `--verbose` (`verbose=True`). stdout is silenced at the file-descriptor
    level too, so lines that compiled extensions print (DeepSpeed's CPU Adam) are hidden as well;
    srpo-dsl reports on stderr meanwhile, and prints its results after the block.
    """
    if not enabled:
        yield
        return
    unset = [key for key in QUIET_ENV if key not in os.environ]  # a value the user set wins
    os.environ.update({key: QUIET_ENV[key] for key in unset})
    previous_disable = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), stdout_silenced(), stderr_on_fd_2():
            warnings.filterwarnings("ignore", module=LIBRARIES)
            yield
    finally:
        logging.disable(previous_disable)
        for key in unset:
            del os.environ[key]


@contextmanager
def stdout_silenced() -> Iterator[None]:
    """sys.stdout and file descriptor 1 go to the null device for the block (C buffers flushed first)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null, redirect_stdout(null):
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            _flush_c_stdio()
            os.dup2(saved, 1)
            os.close(saved)


def _flush_c_stdio() -> None:
    """fflush(NULL): what C code buffered while stdout was silenced is dropped now, not printed later."""
    import ctypes

    with suppress(OSError, AttributeError):  # no C library to reach (not Linux or macOS)
        ctypes.CDLL(None).fflush(None)


class _OnFd2:
    """A stderr stream that says its descriptor is 2; everything else is the stream's own."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def fileno(self) -> int:
        return 2

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


@contextmanager
def stderr_on_fd_2() -> Iterator[None]:
    """sys.stderr.fileno() is 2 for the block. DeepSpeed silences its compiler probes (`/usr/bin/ld: cannot
    find -laio ... collect2`) by pointing sys.stderr.fileno() at a file; in a notebook that is a copy of
    the kernel's stderr, not descriptor 2 where the compiler writes, so the probe's lines showed."""
    try:
        on_2 = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        on_2 = False
    if on_2:
        yield
        return
    stream, sys.stderr = sys.stderr, _OnFd2(sys.stderr)
    try:
        yield
    finally:
        sys.stderr = stream
