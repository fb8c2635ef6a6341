"""Runs for the viewer's tests: a scripted rollout of the routed math workflow (loops, routes that STOP,
invalid outputs; no model), the same episodes as a training step would record them, and a large trace."""

import json
import re
from pathlib import Path

from tests.support.clitools import cli
from tests.support.training import train_env

REPLIES = {  # each role cycles through its replies: routes that STOP, an invalid solver, a rejection
    "router": ["<route>1,3</route>", "<route>STOP</route>", "<route>2</route>"],
    "solver": ["x = 4, so \\boxed{4}", "I think \\boxed{5}", "no idea"],
    "verifier": ["<verify>reject</verify>", "<verify>approve</verify>"],
    "aggregator": ["FINAL: \\boxed{4}"],
}


def scripted_run(folder: Path) -> Path:
    """`srpo-dsl run workflows/math_routed.srpo` with scripted replies: 3 prompts x 2 samples."""
    replies = folder / "replies.json"
    replies.write_text(json.dumps(REPLIES))
    out = folder / "run"
    args = ["run", "workflows/math_routed.srpo", "--backend", "scripted", "--model", replies]
    done = cli(*args, "--limit", 3, "--samples", 2, "--out", out, env=train_env())
    assert done.returncode == 0, done.stderr
    return out


def traces_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "traces.jsonl").read_text().splitlines()]


def as_training_run(run: Path, out: Path) -> Path:
    """The run's folder as a training run's: each complete event with an update, a metrics and eval log."""
    out.mkdir()
    episodes = traces_of(run)
    for ep in episodes:
        for n, e in enumerate(ep["events"]):
            k = len(e["members"])
            e["update"] = {"advantages": [0.5 - n / 4] * k, "clip_fraction": float(n % 2)}
    (out / "traces.jsonl").write_text("".join(json.dumps(ep) + "\n" for ep in episodes))
    (out / "graph.json").write_text((run / "graph.json").read_text())
    (out / "config.json").write_text(json.dumps({"workflow": "gone.srpo", "options": {"objective": "srpo"}}))
    roles = {"router": 0.1, "solver": 0.3, "verifier": 0.0, "aggregator": 0.2}
    metrics = [
        {"step": s, "return": 0.1 * s, "task_score": 0.05 * s}
        | {f"role/{r}/invalid_rate": v / s for r, v in roles.items()}
        for s in (1, 2, 3)
    ]
    (out / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    evals = [{"step": s, "avg_at_k": 0.2 + s / 10, "pass_at_k": 0.5 + s / 10, "k": 4} for s in (0, 3)]
    (out / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    return out


def many_episodes(run: Path, out: Path, n: int) -> Path:
    """A traces file of `n` episodes: the run's episodes over and over, each with its own id."""
    episodes = traces_of(run)
    out.mkdir()
    with (out / "traces.jsonl").open("w") as f:
        for i in range(n):
            ep = dict(episodes[i % len(episodes)])
            ep["prompt_id"], ep["sample"] = f"big-{i // 2}", i % 2
            ep["episode_id"] = f"big-{i // 2}/{i % 2}"
            f.write(json.dumps(ep) + "\n")
    (out / "graph.json").write_text((run / "graph.json").read_text())
    return out


def page_json(html: str) -> dict:
    """The data a `view` page embeds."""
    found = re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))
