"""One vocabulary from the reward to the loss (docs/training.md, "From your reward to the loss"): one
spelling of behavior in names, credit keys resolved once."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "srpo_dsl"


def test_behavior_has_one_spelling_in_names() -> None:
    """Every name in the code spells it `behavior`, as the trace key `behavior_logprobs` and a reward's
    `member.behavior_logprobs` do (prose may say behaviour)."""
    found = [
        f"{path.relative_to(ROOT)}:{token.start[0]}"
        for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")])
        for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        if token.type == tokenize.NAME and "behaviour" in token.string.lower()
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
