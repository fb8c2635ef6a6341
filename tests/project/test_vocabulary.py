"""One vocabulary from the reward to the loss (docs/training.md, "From your reward to the loss"): one
spelling of behaviour, the trace's old keys named in one place, credit keys resolved once."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "srpo_dsl"
TRACE_KEY_HOMES = {"runtime/episode.py", "runtime/traces.py"}  # where the trace key `behavior_logprobs` lives


def test_behaviour_has_one_spelling_but_the_trace_key() -> None:
    """`behaviour` everywhere; `behavior` only as the key a trace writes, where traces are (de)serialized."""
    found = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in re.finditer(r"\bbehavior\w*", line)
        if match.group() != "behavior_logprobs" or str(path.relative_to(PACKAGE)) not in TRACE_KEY_HOMES
    ]
    assert found == []


def test_credit_keys_are_resolved_in_runtime_credit_only() -> None:
    """`member_return` (a key's resolution) is called from runtime/credit.py and the public
    `TraceEpisode.return_of` only: the training rows read the returns recorded with the reward."""
    callers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"\bmember_return\(", path.read_text(encoding="utf-8"))
    )
    assert callers == ["runtime/credit.py", "runtime/traces.py"]
