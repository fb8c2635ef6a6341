"""Answer normalisation (SQuAD / Search-R1 style), exact match and token F1."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def _golds(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(pred: str | None, golds: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer."""
    if pred is None:
        return 0.0
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in _golds(golds)))


def f1(pred: str | None, golds: str | Sequence[str]) -> float:
    """Best token-level F1 of the normalised prediction against any gold answer."""
    if pred is None:
        return 0.0
    p = normalize_answer(pred).split()
    best = 0.0
    for g in _golds(golds):
        gt = normalize_answer(g).split()
        common = sum((Counter(p) & Counter(gt)).values())
        if common:
            precision, recall = common / len(p), common / len(gt)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best
