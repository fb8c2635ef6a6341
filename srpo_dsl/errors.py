"""The exceptions srpo-dsl raises for a failure the user can fix, by what the CLI does with them.

Every one is a `SrpoDslError` whose message is one line and whose `exit_code` is the command line's
(docs/cli.md, "Exit codes"): a `UsageError` (2) is a call that cannot be made as given (an unknown
option, a missing file, an output folder that holds a run, a disk that refuses the results: `WriteError`);
an `InputError` (1) is an input that is wrong (the workflow, its data, the user's own Python, the model,
the machine). The Python API raises them; the CLI prints the message and exits with the code. Anything
else is a bug in srpo-dsl.
"""

from __future__ import annotations

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class SrpoDslError(Exception):
    """A failure the user can fix: a one-line message, and the CLI's exit code."""

    exit_code = EXIT_INPUT


class UsageError(SrpoDslError):
    """A call that cannot be made as given: an unknown option, a missing file, a taken output folder."""

    exit_code = EXIT_USAGE


class InputError(SrpoDslError):
    """An input that is wrong: the workflow, its data, the user's code, the model, the machine."""

    exit_code = EXIT_INPUT


class WriteError(UsageError):
    """An output the disk refused (read-only, full, no permission): `cannot write PATH: REASON`."""

    def __init__(self, path: object, reason: str):
        super().__init__(f"cannot write {path}: {reason}")
        self.path, self.reason = path, reason

    def __reduce__(self) -> tuple[type, tuple[object, str]]:  # pickles across processes
        return (WriteError, (self.path, self.reason))
