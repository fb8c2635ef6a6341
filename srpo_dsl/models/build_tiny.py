"""Rebuild the shipped `builtin:tiny` (package data), or check that a rebuild reproduces it.

    python -m srpo_dsl.models.build_tiny           # rewrite srpo_dsl/models/tiny-v1/ (about 7 min, one core)
    python -m srpo_dsl.models.build_tiny --check   # build in a temporary folder, compare file by file

The build runs on one CPU thread with fixed seeds, so it is deterministic for a given
version of torch, transformers and tokenizers on a given kind of CPU. `--check` exits 1
when a file differs, naming it (and, for the weights, the largest difference).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import sys
import tempfile
import time
from pathlib import Path

from srpo_dsl.models.tiny import SHIPPED, WarmupReport, build_tiny_model

WEIGHTS = "model.safetensors"
VERSION_KEY = (
    "transformers_version"  # config.json and generation_config.json name the version that wrote them
)


def differing_files(a: Path, b: Path) -> list[str]:
    """Names present in only one folder or with different bytes (JSON files: different content but for
    the `transformers_version` that wrote them)."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    return [n for n in names if not ((a / n).is_file() and (b / n).is_file() and same_file(a / n, b / n))]


def same_file(a: Path, b: Path) -> bool:
    if filecmp.cmp(a, b, False):
        return True
    if a.suffix != ".json":
        return False
    left, right = (json.loads(p.read_text(encoding="utf-8")) for p in (a, b))
    for config in (left, right):
        config.pop(VERSION_KEY, None)
    return left == right


def largest_weight_difference(a: Path, b: Path) -> float:
    """max |w_a - w_b| over all tensors of two weight files with the same names and shapes."""
    from safetensors.torch import load_file

    left, right = load_file(a), load_file(b)
    if left.keys() != right.keys() or any(left[k].shape != right[k].shape for k in left):
        return float("inf")
    return max(float((left[k] - right[k]).abs().max()) for k in left)


def summary(report: WarmupReport) -> str:
    return (
        f"held-out team accuracy {report.sampled_team_accuracy:.1%} sampled, "
        f"{report.greedy_team_accuracy:.1%} greedy; final loss {report.final_loss}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="rebuild in a temporary folder and compare")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if not args.check:
        report = build_tiny_model(SHIPPED, replace=True)
        print(f"wrote {SHIPPED} in {time.perf_counter() - start:.0f}s: {summary(report)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        rebuilt = Path(tmp) / SHIPPED.name
        report = build_tiny_model(rebuilt)
        diff = differing_files(SHIPPED, rebuilt)
        weights = largest_weight_difference(SHIPPED / WEIGHTS, rebuilt / WEIGHTS) if WEIGHTS in diff else 0.0
    took = f"{time.perf_counter() - start:.0f}s"
    if diff:
        print(
            f"rebuild differs from {SHIPPED} in {', '.join(diff)} (max |weight change| {weights:.3g}; {took})"
        )
        return 1
    print(f"rebuild matches {SHIPPED} byte for byte ({took}): {summary(report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
