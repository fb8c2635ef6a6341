"""A file that is not UTF-8 text, given where text is read: one line naming the file and the first byte
that is not (for task data in JSON Lines, also its line), never Python's bare codec message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from srpo_dsl.backends.base import BackendError
from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.envs.data import load_tasks
from srpo_dsl.envs.retrieval import RetrieverError, read_corpus
from srpo_dsl.runtime.traces import TraceError, read_traces
from srpo_dsl.sweep.experiment import ExperimentError, load_experiment
from tests.support.clitools import cli

GOOD = b'{"question": "1+1", "answer": "2"}\n'


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    """A good first line, then a Latin-1 byte (0xe9) at offset 52 of the file, on line 2."""
    path = tmp_path / "data.jsonl"
    path.write_bytes(GOOD + b'{"question": "caf\xe9", "answer": "3"}\n')
    return path


def test_task_data_names_the_file_the_line_and_the_byte(binary: Path) -> None:
    with pytest.raises(ValueError) as err:
        load_tasks(binary, kind="math")
    assert str(err.value) == f"{binary}:2: not UTF-8 text (byte 0xe9 at offset 52)"
    as_json = binary.rename(binary.with_suffix(".json"))
    with pytest.raises(ValueError) as err:
        load_tasks(as_json, kind="math")
    assert str(err.value) == f"{as_json}: not UTF-8 text (byte 0xe9 at offset 52)"


@pytest.mark.parametrize(
    "read, error, words",
    [
        (read_corpus, RetrieverError, "cannot read corpus {p}"),
        (ScriptedBackend, BackendError, "cannot read the reply script `{p}`"),
        (read_traces, TraceError, "cannot read {p}"),
        (load_experiment, ExperimentError, "cannot read {p}"),
    ],
)
def test_every_other_reader_names_the_file_and_the_byte(binary: Path, read, error, words) -> None:
    with pytest.raises(error) as err:
        read(binary)
    assert str(err.value) == words.format(p=binary) + ": not UTF-8 text (byte 0xe9 at offset 52)"


def test_the_command_line_says_it_in_one_line(binary: Path, tmp_path: Path) -> None:
    done = cli("run", "workflows/quickstart.srpo", "--data", binary, "--out", tmp_path / "r")
    assert done.returncode == 1 and not (tmp_path / "r").exists()
    assert re.fullmatch(
        rf"error: {re.escape(str(binary))}:2: not UTF-8 text \(byte 0xe9 at offset 52\)\n", done.stderr
    )
