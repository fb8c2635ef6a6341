"""Environments: task data, rewards (math equivalence, exact match, F1) and retrieval tools.

Names are imported on first use, so `srpo_dsl.envs.arith` does not pay for math-verify
(sympy) or bm25s.
"""

from __future__ import annotations

from srpo_dsl.lazy import lazy_exports

_EXPORTS = {
    "normalize_answer": "answers",
    "exact_match": "answers",
    "f1": "answers",
    "make_arith_tasks": "arith",
    "is_heldout": "arith",
    "load_tasks": "data",
    "open_tasks": "data",
    "normalize_record": "data",
    "math_equiv": "math",
    "canonical_answer": "math",
    "normalize_math": "math",
    "REWARDS": "rewards",
    "RewardFn": "rewards",
    "Document": "retrieval",
    "Retriever": "retrieval",
    "RetrieverError": "retrieval",
    "Bm25Retriever": "retrieval",
    "HttpRetriever": "retrieval",
    "make_retriever": "retrieval",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
