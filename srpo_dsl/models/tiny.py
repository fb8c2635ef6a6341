"""The embedded default model `builtin:tiny`: a ~0.4M-parameter Llama warmed on the quickstart team
and the tool quickstart's agent. What other code imports: its name, its folder, `ensure_tiny_model`.

It ships with the package (`srpo_dsl/models/tiny-v1/`, about 1.5 MB), made by
`python -m srpo_dsl.models.build_tiny`, which runs the build on one CPU thread so a
rebuild gives the same bytes. Other seeds (`ensure_tiny_model(seed=...)`), or a package
without the folder, build on first use (about 7 minutes on one core) into
`<cache>/tiny-v1/`, where the cache is `$SRPO_DSL_CACHE` or `~/.cache/srpo-dsl`.

The model: a byte-level BPE tokenizer (digits split one by one; no chat template, prompts
are BOS + text) and a 2-layer Llama trained by a short supervised pass on synthetic
transcripts of every quickstart role and of the tool agent. The build is in the modules beside
this one: `episodes.py` (the two workflows stepped as the executor steps them), `transcripts.py`
(the synthetic episodes), `tokenizer.py`, `warmup.py` (the supervised pass, the report) and
`evaluation.py` (the held-out figures); `recipe.py` holds the name, the recipe and the report they
share. Finding the shipped folder imports none of them but `recipe.py`, nor torch.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from srpo_dsl.models.recipe import RECIPE, TINY_MODEL_ID, Recipe, WarmupReport

TINY_NAME = "tiny-v1"
SHIPPED = Path(__file__).with_name(TINY_NAME)  # package data, made by `python -m srpo_dsl.models.build_tiny`
MARKER = "warmup.json"  # written last: its presence means the folder is complete


def cache_root() -> Path:
    return Path(os.environ.get("SRPO_DSL_CACHE") or Path.home() / ".cache" / "srpo-dsl")


def ensure_tiny_model(cache_dir: Path | None = None, *, progress: bool = True, seed: int = 0) -> Path:
    """The finished tiny model's folder: the shipped one (seed 0), else the cache's, built if needed."""
    if seed == 0 and (SHIPPED / MARKER).exists():
        return SHIPPED
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    target = root / (TINY_NAME if seed == 0 else f"{TINY_NAME}-seed{seed}")
    if (target / MARKER).exists():
        return target
    report = build_tiny_model(target, seed=seed, progress=progress)
    if progress:
        print(
            f"built {TINY_MODEL_ID}: held-out team accuracy {report.sampled_team_accuracy:.0%} sampled, "
            f"{report.greedy_team_accuracy:.0%} greedy -> {target}"
        )
    return target


def build_tiny_model(
    target: Path, *, seed: int = 0, progress: bool = True, replace: bool = False, recipe: Recipe = RECIPE
) -> WarmupReport:
    """Build into `target` atomically: a temporary sibling folder, renamed (over an old one if `replace`).

    Deterministic: one CPU thread and fixed seeds, so the same code and library versions on
    the same kind of CPU give the same bytes.
    """
    from srpo_dsl.models.warmup import build  # torch and transformers: only when a build is needed

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        report = build(tmp, recipe, seed=seed, progress=progress)
        (tmp / MARKER).write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
        for path in [tmp, *tmp.iterdir()]:  # readable by all, like any installed package file
            path.chmod(0o755 if path.is_dir() else 0o644)
        if replace:
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / MARKER).exists():  # not a concurrent build that finished first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def warmup_report(path: Path) -> WarmupReport:
    """The report a finished tiny model folder was built with."""
    return WarmupReport(**json.loads((Path(path) / MARKER).read_text(encoding="utf-8")))
