"""The training loop: rollouts -> rows -> event-atomic micro-batches -> one update per engine.

Per step: each rank rolls out its share of the step's prompts (whole groups of G on one
rank), builds rows (incomplete events dropped), recomputes old log-probs with a no-grad
pass (or takes the behaviour log-probs), then runs `epochs` optimizer steps over
`micro_batches` event-atomic micro-batches. The update is exact for events whose members
come from different trainable policies (SRPO.md §2, gradient view):

    W = d(loss)/d(logprobs)          on a DETACHED [B, T] log-prob tensor (autograd)
    loss_p = sum(W_p * logprobs_p)   back-propagated through policy p's own engine

The loss is normalised by the GLOBAL event (token, row) count of the optimizer step, and
each engine's backward is scaled by the world size (DeepSpeed averages gradients over
ranks) without DeepSpeed's 1/gradient_accumulation_steps, so neither the micro-batch nor
the rank layout changes the update. Every rank runs the same forwards per engine in the
same order (an empty group runs a zero-weight dummy row), as ZeRO's collectives require.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from srpo_dsl.backends.hf import pack_sequences, token_logprobs
from srpo_dsl.cli.common import write_atomic
from srpo_dsl.lang.schema import TrainOptions
from srpo_dsl.rl.batching import plan_batches
from srpo_dsl.rl.engine import Dist, Policy, load_engines, save_engines, step_with_norm, sync_rollout
from srpo_dsl.rl.objectives import get_objective
from srpo_dsl.rl.rows import Rows, build_rows
from srpo_dsl.runtime.metrics import dataset_metrics

CHECKPOINTS = "checkpoints"


class TrainError(Exception):
    """A user-facing training failure (bad options, files, models); one line."""


# --- the update --------------------------------------------------------------------------


def pad_right(values: Sequence[Sequence[float]], width: int) -> Tensor:
    """[N, width] float32, zero-padded rows."""
    out = torch.zeros(len(values), width)
    lengths = torch.tensor([len(v) for v in values], dtype=torch.long)
    mask = torch.arange(width) < lengths[:, None]
    if mask.any():
        out[mask] = torch.tensor([x for v in values for x in v], dtype=torch.float32)
    return out


def response_logprobs(
    model: torch.nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_id: int,
    temperature: float,
    device: torch.device,
    with_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """[n, max response length] log-probs (and entropies) of the response tokens, response-aligned."""
    batch = pack_sequences(prompts, responses, pad_id)
    out = token_logprobs(
        model,
        batch.input_ids.to(device),
        batch.attention_mask.to(device),
        batch.response_mask.to(device),
        temperature,
        with_entropy,
    )
    width = max(1, max(len(r) for r in responses))
    starts = torch.tensor([len(p) for p in prompts], device=device)
    lp = out[0] if with_entropy else out
    cols = (starts[:, None] + torch.arange(width, device=device)).clamp(max=lp.shape[1] - 1)
    if with_entropy:
        return lp.gather(1, cols), out[1].gather(1, cols)
    return lp.gather(1, cols)


@dataclass(frozen=True)
class Batch:
    """One step's rows as response-aligned tensors; `temperatures[i]` is row i's sampling temperature."""

    rows: Rows
    mask: Tensor  # [N, T] bool, generated tokens
    behaviour: Tensor  # [N, T]
    temperatures: list[float]

    @classmethod
    def of(cls, rows: Rows, temperatures: Mapping[str, Mapping[str, float]]) -> Batch:
        lengths = torch.tensor(rows.response_lengths, dtype=torch.long)
        width = max(1, int(lengths.max())) if len(rows) else 1
        return cls(
            rows,
            torch.arange(width) < lengths[:, None],
            pad_right(rows.behavior_logprobs, width),
            [temperatures[p][n] for p, n in zip(rows.policies, rows.nodes)],
        )


def forward_groups(
    policies: Mapping[str, Policy], temperatures: Mapping[str, Mapping[str, float]]
) -> list[tuple[str, float]]:
    """(policy, temperature) of trainable policies: one forward each per micro-batch, rank-wide order."""
    return [
        (p, t)
        for p in sorted(temperatures)
        if policies[p].engine is not None
        for t in sorted(set(temperatures[p].values()))
    ]


def score_group(
    policy: Policy,
    model: torch.nn.Module,
    batch: Batch,
    index: list[int],
    temperature: float,
    device: torch.device,
    with_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """[len(index), W] log-probs (and entropies) of the rows at `index`; a 1-token dummy row when empty."""
    if not index:
        return response_logprobs(
            model, [[policy.pad_id]], [[policy.pad_id]], policy.pad_id, 1.0, device, with_entropy
        )
    rows = batch.rows
    return response_logprobs(
        model,
        [rows.prompt_token_ids[i] for i in index],
        [rows.response_token_ids[i] for i in index],
        policy.pad_id,
        temperature,
        device,
        with_entropy,
    )


def members_of(batch: Batch, micro: list[int], policy: str, temperature: float) -> list[int]:
    """Positions in `micro` of the rows scored by (policy, temperature)."""
    rows = batch.rows
    return [
        j for j, i in enumerate(micro) if rows.policies[i] == policy and batch.temperatures[i] == temperature
    ]


@torch.no_grad()
def score_rows(
    policies: Mapping[str, Policy],
    batch: Batch,
    plan: list[list[int]],
    groups: list[tuple[str, float]],
    device: torch.device,
    reference: bool = False,
) -> Tensor:
    """[N, T] log-probs of every trainable row (current or reference weights), behaviour elsewhere.

    Follows the micro-batch plan so every rank runs the same forwards (ZeRO-3 gathers).
    """
    out = batch.behaviour.clone().to(device)
    for micro in plan:
        for p, t in groups:
            pos = members_of(batch, micro, p, t)
            model = policies[p].reference if reference else policies[p].model
            if reference and not pos:
                continue  # a plain module: no collectives to keep in step
            lp = score_group(policies[p], model, batch, [micro[j] for j in pos], t, device)
            if pos:
                rows = torch.tensor([micro[j] for j in pos], device=device)
                out[rows, : lp.shape[1]] = lp
    return torch.where(batch.mask.to(device), out, 0.0)


def all_reduce(values: Sequence[float], device: torch.device) -> list[float]:
    """Element-wise sum over ranks."""
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(t)
    return t.tolist()


def token_weights(
    objective: Any,
    opts: TrainOptions,
    logprobs: Tensor,
    old: Tensor,
    mask: Tensor,
    event_ids: Tensor,
    adv: Tensor,
    ref: Tensor | None,
    counts: Sequence[float],
) -> tuple[Tensor, float, dict[str, float]]:
    """(W, loss, metrics): W = d(loss)/d(logprobs), taken on the detached [B, T] log-probs."""
    logprobs = logprobs.detach().requires_grad_(True)
    num_events, num_tokens, num_rows = (int(c) for c in counts)
    loss, metrics = objective(
        logprobs,
        old,
        mask,
        event_ids,
        adv,
        clip_eps=opts.clip,
        set_norm=opts.set_norm,
        num_events=num_events,
        num_tokens=num_tokens,
        num_rows=num_rows,
        ref_logprobs=ref,
        kl_coef=opts.kl,
    )
    if not math.isfinite(loss.item()):
        raise TrainError(f"non-finite loss {loss.item()} (check the rewards and the learning rate)")
    (weights,) = torch.autograd.grad(loss, logprobs)
    return weights, loss.item(), metrics


def update(
    policies: Mapping[str, Policy],
    rows: Rows,
    opts: TrainOptions,
    dist: Dist,
    temperatures: Mapping[str, Mapping[str, float]],
) -> dict[str, float]:
    """`opts.epochs` optimizer steps of every engine on this rank's `rows` (collective over ranks).

    temperatures[policy][node]: the sampling temperature of a node's members (log-probs use it).
    Returns loss, grad_norm, clip_fraction (means over epochs) and the global counts.
    """
    device = dist.device
    objective = get_objective(opts.objective)
    batch = Batch.of(rows, temperatures)
    groups = forward_groups(policies, temperatures)
    engines = {p: policies[p].engine for p in sorted({p for p, _ in groups})}
    tokens = [len(a) + len(b) for a, b in zip(rows.prompt_token_ids, rows.response_token_ids)]
    plan = plan_batches(rows.event_ids.tolist(), tokens, world_size=1, micro_batches=opts.micro_batches)[0]
    counts = all_reduce(
        [rows.num_events, float(batch.mask.sum()), len(rows)], device
    )  # global |B|, tokens, rows
    if counts[0] == 0:
        return {"num_events": 0.0, "num_rows": 0.0, "num_tokens": 0.0}
    # With one epoch the weights cannot move before each row is scored (gradient accumulation
    # steps only at the boundary), so the update's own detached log-probs ARE the recomputed
    # old log-probs: skip the extra no-grad pass (exact; modules run without dropout).
    reuse = opts.old_logprobs == "recompute" and opts.epochs == 1
    old = (
        None
        if reuse
        else score_rows(policies, batch, plan, groups, device)
        if opts.old_logprobs == "recompute"
        else batch.behaviour.to(device)
    )
    ref = score_rows(policies, batch, plan, groups, device, reference=True) if opts.kl > 0 else None
    mask, event_ids, adv = batch.mask.to(device), rows.event_ids.to(device), rows.advantages.to(device)
    loss_sum = clip_sum = clip_weight = norm_sum = 0.0
    for _ in range(opts.epochs):
        norms: dict[str, float] = {}
        for m, micro in enumerate(plan):
            idx = torch.tensor(micro, dtype=torch.long, device=device)
            width = max(1, int(mask[idx].sum(-1).max())) if micro else 1
            parts = {(p, t): members_of(batch, micro, p, t) for p, t in groups}
            scored = {
                (p, t): score_group(
                    policies[p],
                    policies[p].model,
                    batch,
                    [micro[j] for j in pos],
                    t,
                    device,
                    opts.entropy > 0,
                )
                for (p, t), pos in parts.items()
            }
            lps = {k: v[0] if opts.entropy > 0 else v for k, v in scored.items()}
            # entropy bonus: -c * sum(mask * H) / |tokens|, linear in H, so H itself is its surrogate
            bonus = {
                k: (-opts.entropy / counts[1]) * torch.where(mask[idx][pos, : v[1].shape[1]], v[1], 0.0).sum()
                for k, v in scored.items()
                if opts.entropy > 0 and (pos := parts[k])
            }
            loss_sum += sum(b.item() for b in bonus.values())
            weights = torch.zeros(len(micro), width, device=device)
            if micro:
                # rows of frozen policies keep their old log-probs: log-ratio 0
                logprobs = (
                    old[idx, :width].clone()
                    if old is not None
                    else torch.zeros(len(micro), width, device=device)
                )
                for key, pos in parts.items():
                    if pos:
                        logprobs[pos, : lps[key].shape[1]] = lps[key].detach()
                old_mb = old[idx, :width] if old is not None else logprobs.clone()
                weights, loss, metrics = token_weights(
                    objective,
                    opts,
                    logprobs,
                    old_mb,
                    mask[idx, :width],
                    event_ids[idx],
                    adv[idx],
                    None if ref is None else ref[idx, :width],
                    counts,
                )
                w = metrics.get("num_events", metrics.get("num_tokens", 0.0))
                loss_sum += loss
                clip_sum, clip_weight = clip_sum + w * metrics["clip_fraction"], clip_weight + w
            for p, engine in engines.items():
                surrogate = sum(  # sum(W_p * logprobs_p); an empty group adds 0 * its dummy row
                    (weights[pos, : lps[key].shape[1]] * lps[key]).sum() + bonus.get(key, 0.0)
                    if pos
                    else 0.0 * lps[key].sum()
                    for key, pos in parts.items()
                    if key[0] == p
                )
                engine.backward(
                    surrogate * dist.world_size, scale_wrt_gas=False
                )  # DeepSpeed averages over ranks
                if m == len(plan) - 1:
                    norms[p] = step_with_norm(engine)  # the accumulation boundary: the optimizer steps
                else:
                    engine.step()
        norm_sum += math.sqrt(sum(n**2 for n in norms.values()))
    loss_sum, clip_sum, clip_weight = all_reduce([loss_sum, clip_sum, clip_weight], device)
    return {
        "loss": loss_sum / opts.epochs,
        "grad_norm": norm_sum / opts.epochs,
        "clip_fraction": clip_sum / max(clip_weight, 1e-12),
        "num_events": counts[0],
        "num_tokens": counts[1],
        "num_rows": counts[2],
    }


# --- data, seeds, evaluation --------------------------------------------------------------


def seed_of(*parts: object) -> int:
    """A stable 31-bit seed from any parts (same on every machine and run)."""
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def step_prompts(num_tasks: int, batch: int, step: int, seed: int) -> list[int]:
    """Task indices of `step` (1-based): a fresh permutation per pass over the data, no repeats in a step."""
    per_pass = num_tasks // batch
    data_pass, j = divmod(step - 1, per_pass)
    order = torch.randperm(
        num_tasks, generator=torch.Generator().manual_seed(seed_of("data", seed, data_pass))
    )
    return order[j * batch : (j + 1) * batch].tolist()


def evaluate(executor: Any, tasks: list[dict], opts: TrainOptions, dist: Dist, step: int) -> dict[str, float]:
    """Avg@k and Pass@k over the held-out prompts (k = eval_k samples each); each rank samples its share."""
    share = tasks[dist.rank :: dist.world_size]
    episodes = executor.run(share, samples=opts.eval_k, seed=seed_of("eval", opts.seed, step, dist.rank))
    local = dataset_metrics("eval", episodes, opts.eval_k) if episodes else None
    q = local.queries if local else 0
    avg, pas, n = all_reduce(
        [local.avg_at_k * q if local else 0.0, local.pass_at_k * q if local else 0.0, q], dist.device
    )
    return {
        "step": step,
        "avg_at_k": avg / max(n, 1),
        "pass_at_k": pas / max(n, 1),
        "k": opts.eval_k,
        "n_prompts": int(n),
    }


# --- checkpoints -----------------------------------------------------------------------------


def latest_checkpoint(out: Path) -> Path | None:
    """The highest complete `step-N` folder (temporary `.step-N.tmp` folders are never complete)."""
    found = [(int(p.name[5:]), p) for p in (out / CHECKPOINTS).glob("step-*") if p.name[5:].isdigit()]
    return max(found)[1] if found else None


def rng_state() -> dict[str, Any]:
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def save_checkpoint(
    out: Path, step: int, policies: Mapping[str, Policy], state: Mapping[str, Any], dist: Dist
) -> Path:
    """Write OUT/checkpoints/step-N atomically: a temporary folder, renamed once every rank is done."""
    final = out / CHECKPOINTS / f"step-{step}"
    tmp = out / CHECKPOINTS / f".step-{step}.tmp"
    if dist.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    save_engines(policies, tmp)
    torch.save(rng_state(), tmp / f"rng-rank{dist.rank}.pt")
    barrier()
    if dist.rank == 0:
        write_atomic(tmp / "state.json", json.dumps(state, indent=2) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
    barrier()
    return final


def load_checkpoint(folder: Path, policies: Mapping[str, Policy], dist: Dist) -> None:
    """Engine states and this rank's RNG states (state.json is read by the caller)."""
    load_engines(policies, folder)
    set_rng_state(torch.load(folder / f"rng-rank{dist.rank}.pt", weights_only=False))


# --- the loop --------------------------------------------------------------------------------


def node_temperatures(graph: Any) -> dict[str, dict[str, float]]:
    """temperatures[policy][node] of every event node (0 = greedy scores at temperature 1)."""
    out: dict[str, dict[str, float]] = {}
    for node, data in graph.nodes(data=True):
        for policy in data.get("policy", []) if data.get("event_type") else []:
            out.setdefault(policy, {})[node] = float(data["temperature"])
    return out


def resolve_options(train_block: Mapping[str, Any], overrides: Mapping[str, Any]) -> TrainOptions:
    from pydantic import ValidationError

    unknown = set(overrides) - set(TrainOptions.model_fields)
    if unknown:
        raise TrainError(f"unknown training option(s): {', '.join(sorted(unknown))}")
    try:
        opts = TrainOptions(**{**train_block, **{k: v for k, v in overrides.items() if v is not None}})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise TrainError(f"training option `{'.'.join(map(str, err['loc']))}`: {err['msg']}") from None
    return opts


def append_jsonl(path: Path, row: Mapping[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def truncate_jsonl(path: Path, last_step: int) -> None:
    """Keep the rows up to `last_step` (a resumed run rewrites what came after its checkpoint)."""
    if path.exists():
        rows = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line)["step"] <= last_step
        ]
        write_atomic(path, "".join(r + "\n" for r in rows))


def train(
    workflow_path: Path,
    out_dir: Path,
    overrides: Mapping[str, Any] | None = None,
    resume: bool = False,
    *,
    models: Mapping[str, str] | None = None,
    ds_config: Path | None = None,
    offload: str = "none",
    device: str | None = None,
    progress: bool = True,
) -> list[dict[str, float]]:
    """Train a workflow's trainable policies with its `train` options (`overrides` win).

    models: policy -> model path/spec (default: the workflow's). Writes OUT/metrics.jsonl,
    OUT/eval.jsonl, OUT/tb, OUT/config.json, OUT/traces.jsonl (the last step's rollouts of
    rank 0) and OUT/checkpoints/step-N. Returns this call's per-step metrics.
    """
    from tqdm.auto import tqdm

    from srpo_dsl.backends import resolve_model_spec
    from srpo_dsl.rl.engine import build_policy, init_distributed, read_ds_config
    from srpo_dsl.rl.engine import ds_config as make_ds_config
    from srpo_dsl.runtime.executor import Executor
    from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data
    from srpo_dsl.runtime.traces import to_trace, write_traces

    out = Path(out_dir)
    wf = load_workflow(Path(workflow_path))
    graph = wf.graph
    opts = resolve_options(graph.graph["train"], overrides or {})
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainError("--device cuda: no CUDA device is available (use --device cpu)")
    specs = graph.graph["policies"]
    if not any(s["trainable"] for s in specs.values()):
        raise TrainError(f"{workflow_path}: no trainable policy (every policy is `frozen`)")
    tasks = task_data(wf, split="train")
    eval_tasks = task_data(wf, split="eval")[: opts.eval_size]
    if len(tasks) < opts.batch:
        raise TrainError(f"batch = {opts.batch} prompts per step but the task has only {len(tasks)}")
    user_ds = read_ds_config(ds_config) if ds_config else {}
    checkpoint = latest_checkpoint(out) if resume else None
    if not resume and (latest_checkpoint(out) or (out / "metrics.jsonl").exists()):
        raise TrainError(f"{out} already holds a run: pass --resume to continue it, or choose another --out")

    dist = init_distributed(device)
    if dist.rank != 0:
        barrier()  # rank 0 first: it builds `builtin:tiny` when needed, the others then find it
    paths = {name: resolve_model_spec((models or {}).get(name, s["model"])) for name, s in specs.items()}
    if dist.rank == 0:
        barrier()
    config = make_ds_config(opts, device=device, world_size=dist.world_size, offload=offload, user=user_ds)
    resolved = {
        "workflow": str(workflow_path),
        "graph_hash": graph.graph["hash"],
        "options": opts.model_dump(),
        "models": paths,
        "device": device,
        "world_size": dist.world_size,
        "offload": offload,
        "ds_config": config,
    }
    state = json.loads((checkpoint / "state.json").read_text(encoding="utf-8")) if checkpoint else None
    if state is not None:
        before = state["config"]
        changed = [k for k in resolved if k != "options" and before.get(k) != resolved[k]]
        changed += [
            k for k, v in resolved["options"].items() if k != "steps" and before["options"].get(k) != v
        ]
        if changed:
            raise TrainError(f"cannot resume {checkpoint}: {', '.join(changed)} changed since it was written")
    policies = {name: build_policy(name, paths[name], s, opts, dist, config) for name, s in specs.items()}
    executor = Executor(graph, {n: p.backend for n, p in policies.items()}, wf.renderer(), build_tools(wf))
    temperatures = node_temperatures(graph)
    start = 0
    if checkpoint is not None and state is not None:
        load_checkpoint(checkpoint, policies, dist)
        start = state["data_cursor"]["next_step"] - 1
        for p in policies.values():
            if p.engine is not None:
                sync_rollout(p)  # the loaded weights reach generation (ZeRO-3: its full copy)
            p.backend.version = state["versions"].get(p.name, 0)
    writer = None
    if dist.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "config.json", json.dumps(resolved, indent=2) + "\n")
        for name in ("metrics.jsonl", "eval.jsonl"):
            truncate_jsonl(out / name, start if start else -1)
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(
            str(out / "tb"), purge_step=start + 1 if start else 0
        )  # drop a killed run's tail

    def log_eval(step: int) -> None:
        row = evaluate(executor, eval_tasks, opts, dist, step)
        if writer is not None:
            append_jsonl(out / "eval.jsonl", row)
            writer.add_scalar(f"eval/avg_at_{opts.eval_k}", row["avg_at_k"], step)
            writer.add_scalar(f"eval/pass_at_{opts.eval_k}", row["pass_at_k"], step)

    if start == 0 and eval_tasks:
        log_eval(0)
    history: list[dict[str, float]] = []
    bar = tqdm(
        range(start + 1, opts.steps + 1),
        initial=start,
        total=opts.steps,
        desc="train",
        unit="step",
        disable=not progress or dist.rank != 0,
    )
    for step in bar:
        t0 = time.perf_counter()
        prompts = [tasks[i] for i in step_prompts(len(tasks), opts.batch, step, opts.seed)]
        episodes = executor.run(
            prompts[dist.rank :: dist.world_size],
            samples=opts.group,
            seed=seed_of("rollout", opts.seed, step, dist.rank),
        )
        rows = build_rows(episodes, opts.objective)
        rows = rows.select(trainable_rows(rows, policies))
        lr = next(p.engine.get_lr()[0] for p in policies.values() if p.engine is not None)
        stats = update(policies, rows, opts, dist, temperatures)
        for p in policies.values():
            if p.engine is not None and stats["num_events"]:
                sync_rollout(p)  # new weights for generation, policy version + 1
        n_ep, reward, score, resp, dropped = all_reduce(
            [
                len(episodes),
                sum(e.reward for e in episodes),
                sum(e.score for e in episodes),
                float(sum(rows.response_lengths)),
                rows.dropped_events,
            ],
            dist.device,
        )
        row = {
            "step": step,
            "score": reward / max(n_ep, 1),
            "accuracy": score / max(n_ep, 1),
            "grad_norm": stats.get("grad_norm", 0.0),
            "response_length": resp / max(stats["num_rows"], 1),
            "mean_set_size": stats["num_rows"] / max(stats["num_events"], 1),
            "num_events": stats["num_events"],
            "dropped_events": dropped,
            "clip_fraction": stats.get("clip_fraction", 0.0),
            "lr": lr,
            "loss": stats.get("loss", 0.0),
            "time": time.perf_counter() - t0,
        }
        history.append(row)
        if writer is not None:
            append_jsonl(out / "metrics.jsonl", row)
            for key, value in row.items():
                if key != "step":
                    writer.add_scalar(f"train/{key}", value, step)
            write_traces(out / "traces.jsonl", [to_trace(ep, graph.graph["hash"]) for ep in episodes])
            bar.set_postfix(score=f"{row['score']:.3f}", loss=f"{row['loss']:.4f}")
        if eval_tasks and (step % opts.eval_every == 0 or step == opts.steps):
            log_eval(step)
        if step % opts.save_every == 0 or step == opts.steps:
            state = {
                "step": step,
                "data_cursor": {"next_step": step + 1},
                "config": resolved,
                "graph_hash": graph.graph["hash"],
                "versions": {n: p.backend.version for n, p in policies.items()},
            }
            save_checkpoint(out, step, policies, state, dist)
        if writer is not None:
            writer.flush()
    if writer is not None:
        writer.close()
    return history


def trainable_rows(rows: Rows, policies: Mapping[str, Policy]) -> list[int]:
    """Rows of events with at least one trainable member (an all-frozen event has no gradient)."""
    events = {e for e, p in zip(rows.event_ids.tolist(), rows.policies) if policies[p].engine is not None}
    return [i for i, e in enumerate(rows.event_ids.tolist()) if e in events]
