"""The API's exceptions: `WorkflowError` (a workflow that does not compile, with its diagnostics), and the
families of `srpo_dsl.errors` it belongs to. The user's own Python failing is a `UserCodeError` (its
file and line); a call that cannot be made as given a `UsageError`; a wrong input an `InputError`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from srpo_dsl.errors import EXIT_INPUT, EXIT_USAGE, InputError, SrpoDslError, UsageError
from srpo_dsl.io import read_text
from srpo_dsl.lang.errors import Diagnostic, render_pretty
from srpo_dsl.runtime.usercode import UserCodeError

__all__ = [
    "EXIT_INPUT",
    "EXIT_USAGE",
    "InputError",
    "SrpoDslError",
    "UsageError",
    "UserCodeError",
    "WorkflowError",
]


class WorkflowError(InputError):
    """A workflow that does not compile. The message is its first error, `FILE:LINE:COL: error[CODE]: ...`;
    `diagnostics` holds every diagnostic (warnings too), `render()` the errors as `validate` prints them."""

    def __init__(self, path: Path, diagnostics: Sequence[Diagnostic], source: str | None = None):
        self.path, self.diagnostics, self.source = Path(path), list(diagnostics), source
        first = self.errors[0]
        super().__init__(f"{first.span}: {first.severity}[{first.code}]: {first.message}")

    @classmethod
    def of(cls, path: Path, diagnostics: Sequence[Diagnostic]) -> WorkflowError:
        """The error of the file at `path`, its source read again to show (None when it cannot be)."""
        try:
            source: str | None = read_text(path)
        except UsageError:
            source = None
        return cls(path, diagnostics, source)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"] or self.diagnostics

    def render(self) -> str:
        """Every error with its source line, a caret and its hint."""
        return "\n\n".join(render_pretty(d, self.source) for d in self.errors)
