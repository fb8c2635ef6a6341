"""Expected GPU time of each cell of the paper recipes, from the throughput measured on one H100.

    python bench/paper_cost.py                                    # both recipes, the Nov 22 H100 figures
    python bench/paper_cost.py --rollout-tps 16500 --update-tps 60000 experiments/paper_math.toml

The model (docs/benchmarks.md, "The GPU path"): at the bench's 0.6B shape one H100 generated
`--rollout-tps` tokens/s and updated `--update-tps` (prompt + response) tokens/s; both are taken to
scale as 1 / parameters (decoding reads every weight per token, an update costs 6 FLOPs per
parameter per token), so a 4B model runs at 0.6/4 of them. Per cell and step:

    response tokens = batch x group x episode bound x fill          episode bound: the checker's
    update tokens   = response tokens + batch x group x calls x prompt tokens   (`Bounds.tokens`,
    step seconds    = response tokens / rollout tps(P) + update tokens / update tps(P)  `.calls`)

plus the held-out evaluations (`[eval] every`, `k` samples of each question: `--eval-questions`,
the six math benchmarks' sizes capped at `[eval] size`). `fill` is the share of its bound an
episode generates: 1.0 is every round, every replica and every call to its `max_tokens` (what a
random model does, an upper bound); a trained model stops earlier. Times are one GPU's; N GPUs
in data parallel divide them by up to N. Nothing here runs a model: it reads the recipes and the
workflows (`srpo_dsl.load`), so it runs anywhere in a second.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import srpo_dsl
from srpo_dsl.sweep.experiment import Cell, Experiment, load_experiment

ROOT = Path(__file__).resolve().parents[1]
RECIPES = [ROOT / "experiments" / "paper_math.toml", ROOT / "experiments" / "paper_search.toml"]
# Parameters of the recipes' models (their model cards); --params NAME=COUNT for others.
PARAMS = {"Qwen/Qwen3-4B": 4.02e9, "Qwen/Qwen3-8B": 8.19e9, "Qwen/Qwen2.5-3B-Instruct": 3.09e9}
# Questions per benchmark: AIME24, AIME25, AMC23, MATH500, Minerva, OlympiadBench (text-only, English).
MATH_BENCHMARKS = (30, 30, 40, 500, 272, 675)


@dataclass(frozen=True)
class Throughput:
    rollout_tps: float  # generated tokens/s at `params`
    update_tps: float  # updated tokens/s at `params`
    params: float
    prompt_tokens: int  # mean prompt tokens per call
    fill: float

    def scaled(self, params: float) -> tuple[float, float]:
        """(rollout, update) tokens/s of a model of `params` parameters."""
        factor = self.params / params
        return self.rollout_tps * factor, self.update_tps * factor


@dataclass(frozen=True)
class CellCost:
    name: str
    model: str
    policies: int
    episode_tokens: int
    step_s: float
    train_h: float
    eval_h: float


def cell_cost(exp: Experiment, cell: Cell, tp: Throughput, params: dict[str, float]) -> CellCost:
    graph = srpo_dsl.load(cell.workflow).graph
    models = sorted({cell.model or p.model for p in graph.policies.values() if p.kind != "adapter"})
    if len(models) != 1 or models[0] not in params:
        raise SystemExit(f"{cell.workflow}: give each model's size with --params NAME=COUNT ({models})")
    rollout_tps, update_tps = tp.scaled(params[models[0]])
    options = graph.train.model_copy(update=cell.overrides)
    episodes = options.batch * options.group
    response = episodes * graph.bounds.tokens * tp.fill
    update = response + episodes * graph.bounds.calls * tp.prompt_tokens
    step_s = response / rollout_tps + update / update_tps
    every = exp.evaluation.get("eval_every", options.eval_every)
    size = exp.evaluation.get("eval_size", options.eval_size)
    k = exp.evaluation.get("eval_k", options.eval_k)
    questions = sum(min(n, size) for n in MATH_BENCHMARKS) if "math" in cell.workflow.stem else size
    evals = options.steps // every + 1
    eval_s = evals * questions * k * graph.bounds.tokens * tp.fill / rollout_tps
    return CellCost(
        cell.name,
        models[0],
        len(graph.policies),
        graph.bounds.tokens,
        step_s,
        step_s * options.steps / 3600,
        eval_s / 3600,
    )


def table(exp: Experiment, costs: list[CellCost], tp: Throughput) -> str:
    seeds = len(exp.seeds)
    lines = [
        f"{exp.path.name}: {seeds} seeds, fill {tp.fill:g}, one H100 (N GPUs: divide by up to N)",
        "",
        "| cell | model | policies | tokens / episode (bound) | s / step | train h | eval h | h per seed | h, all seeds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in costs:
        per_seed = c.train_h + c.eval_h
        lines.append(
            f"| {c.name} | {c.model} | {c.policies} | {c.episode_tokens:,} | {c.step_s:,.0f} | "
            f"{c.train_h:,.1f} | {c.eval_h:,.1f} | {per_seed:,.1f} | {per_seed * seeds:,.0f} |"
        )
    total = sum(c.train_h + c.eval_h for c in costs) * seeds
    return "\n".join([*lines, f"| **all cells** | | | | | | | | **{total:,.0f}** |"])


def parse_params(values: list[str]) -> dict[str, float]:
    out = dict(PARAMS)
    for value in values:
        name, _, count = value.partition("=")
        try:
            out[name] = float(count)
        except ValueError:
            raise SystemExit(f"--params {value}: expected NAME=COUNT, e.g. Qwen/Qwen3-4B=4.02e9") from None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipes", nargs="*", type=Path, default=RECIPES)
    ap.add_argument("--rollout-tps", type=float, default=8257.0, help="H100, 0.6B, hf engine (Nov 22)")
    ap.add_argument("--update-tps", type=float, default=24882.0, help="H100, 0.6B, ZeRO-0 (Nov 22)")
    ap.add_argument("--measured-params", type=float, default=596_049_920, help="the bench model's size")
    ap.add_argument("--prompt-tokens", type=int, default=400, help="mean prompt tokens per call")
    ap.add_argument("--fill", type=float, nargs="+", default=[1.0, 0.5], help="share of the token bound")
    ap.add_argument("--params", action="append", default=[], help="NAME=COUNT, a model's parameters")
    args = ap.parse_args()
    params = parse_params(args.params)
    for recipe in args.recipes:
        exp = load_experiment(recipe)
        for fill in args.fill:
            tp = Throughput(args.rollout_tps, args.update_tps, args.measured_params, args.prompt_tokens, fill)
            print(table(exp, [cell_cost(exp, c, tp, params) for c in exp.cells], tp), end="\n\n")


if __name__ == "__main__":
    main()
