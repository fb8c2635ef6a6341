"""The training loop, one named step per line (docs/training.md; the objective: docs/objective.md):

    run = prepare_run(plan)                      # data, engines, executor (`prepare.py`); or a checkpoint
    for step in steps:
        episodes = rollout(run, step)            # each rank rolls out its share of the step's prompts, G each
        rows     = training_rows(run, episodes)  # complete events only, one advantage per event (srpo)
        sleep(run.policies)                      # the rollout engines release their memory
        stats    = update(...)                   # event-atomic micro-batches, one optimizer step per engine
        push_weights(run.policies)               # wake, load the new weights: policy version + 1
        log / evaluate / checkpoint

Every rank runs the same collectives in the same order; rank 0 writes the run's files.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from srpo_dsl.envs.task_table import pick
from srpo_dsl.errors import InputError
from srpo_dsl.jsonvalue import JsonObject
from srpo_dsl.progress import progress as progress_lines
from srpo_dsl.rl.distributed.data_order import step_prompts
from srpo_dsl.rl.distributed.process_group import Dist, all_reduce
from srpo_dsl.rl.engines.policies import TrainingPolicy, engine_owners, sync_weights
from srpo_dsl.rl.loop.checkpoint import latest_checkpoint, save_checkpoint
from srpo_dsl.rl.loop.decode_caches import compile_seconds, decode_metrics
from srpo_dsl.rl.loop.determinism import deterministic_kernels
from srpo_dsl.rl.loop.event_updates import event_updates
from srpo_dsl.rl.loop.heldout import evaluate_sets
from srpo_dsl.rl.loop.plan import TrainError, TrainPlan
from srpo_dsl.rl.loop.prepare import TrainingRun, prepare_run
from srpo_dsl.rl.loop.role_metrics import keyed_metrics, step_sums
from srpo_dsl.rl.loop.update import NotFinite, update
from srpo_dsl.rl.objective.rows import Rows, build_rows
from srpo_dsl.rl.transport.feed import NoWorkerLeft
from srpo_dsl.rl.transport.link import Link, join_launch
from srpo_dsl.rl.transport.staleness import stale_rows
from srpo_dsl.rl.transport.worker import run_worker
from srpo_dsl.runfolder import checkpoint_folder
from srpo_dsl.runtime.episode import Episode
from srpo_dsl.seeds import seed_of
from srpo_dsl.stopping import STOPPING, handling

__all__ = ["TrainError", "train"]


def train(plan: TrainPlan, progress: bool = True) -> list[dict[str, float]]:
    """Train the plan's workflow (`plan.make_plan`) into its run folder.

    Writes OUT/metrics.jsonl, OUT/eval.jsonl, OUT/config.json, OUT/traces.jsonl (rank 0's rollouts of the
    last checkpointed step), OUT/checkpoints/step-N, and reports to the trackers of `report_to` (OUT/tb).
    Returns this call's per-step metrics (none in a rollout worker, which serves its batches and returns).
    """
    link = rollout_link(plan)
    if link is not None and link.layout.is_worker:
        return []
    run = prepare_run(plan, link)
    try:
        with deterministic_kernels(run.dist.device):  # bitwise-reproducible steps on CPU
            history = train_steps(run, progress)
    except BaseException:  # a fresh run that fails before its first checkpoint leaves no files behind
        if run.log is not None and run.start == 0 and latest_checkpoint(run.out) is None:
            run.log.discard()
        elif run.log is not None:
            run.log.fail()
        raise
    finally:
        if run.feed is not None:  # the workers stop, also after a Ctrl-C (else each waits on the other)
            run.feed.close()
        if link is not None:
            handling(STOPPING, signal.SIG_DFL)
    if run.log is not None:
        run.log.close()
    return history


def rollout_link(plan: TrainPlan) -> Link | None:
    """With `rollout_workers`, this process's link in the launch (None without); a worker process serves
    its batches here, and the caller returns."""
    if not plan.opts.rollout_workers:
        return None
    link = join_launch(plan.opts.rollout_workers, plan.device)
    if link.layout.is_worker:
        run_worker(plan.workflow, plan.opts, link, plan.rollout)
    else:  # the launcher stops every process when one fails: a trainer cleans up as on Ctrl-C (its
        handling(STOPPING, lambda signum, _: sys.exit(128 + signum))  # launcher says where to resume)
    return link


def train_steps(run: TrainingRun, progress: bool) -> list[dict[str, float]]:
    """The steps still to run, each evaluated and checkpointed when due; this call's metrics."""
    history = []
    bar = progress_bar(run, progress)
    if run.start == 0:
        bar.set_postfix_str("held-out evaluation at step 0")
        evaluate(run, 0)
    for step in bar:
        try:
            history.append(train_step(run, step))
        except NoWorkerLeft as exc:
            raise stopped_without_workers(run, step - 1, exc) from None
        except NotFinite as exc:
            raise diverged(run, step, exc) from None
        bar.set_postfix_str(f"return {history[-1]['return']:.3f}, grad norm {history[-1]['grad_norm']:.3f}")
        if due(step, run.opts.eval_every, run.opts.steps):
            evaluate(run, step)
        if due(step, run.opts.save_every, run.opts.steps):
            checkpoint(run, step)
    return history


def stopped_without_workers(run: TrainingRun, done: int, exc: NoWorkerLeft) -> TrainError:
    """The last rollout worker went away: the steps trained since the last checkpoint are checkpointed
    (with the batches received for later steps) so that `--resume` loses nothing."""
    if done == 0:
        return TrainError(str(exc))
    if latest_checkpoint(run.out) != checkpoint_folder(run.out, done):
        checkpoint(run, done)
    return TrainError(f"{exc}: step {done} is checkpointed in {run.out}, continue with --resume")


class Diverged(InputError):
    """A step whose update was not finite stopped the run (exit 1: the options, rewards or objective)."""


def diverged(run: TrainingRun, step: int, exc: NotFinite) -> Diverged:
    """Step `step`'s update is not finite: it was not taken, so the weights are the last good step's,
    checkpointed here unless they are already (or moved anyway: the last checkpoint stays the last good
    one). Its metrics are not logged; a fresh run with no good step leaves nothing (`train`)."""
    good = step - 1
    if not exc.applied and good > 0 and latest_checkpoint(run.out) != checkpoint_folder(run.out, good):
        checkpoint(run, good)
    last = latest_checkpoint(run.out)
    where = f"the last good checkpoint is step {last.name[5:]}: {last}" if last else "no step was good"
    return Diverged(f"step {step}: {exc}; {where} (check the rewards, the objective and the learning rate)")


def train_step(run: TrainingRun, step: int) -> dict[str, float]:
    """Roll out, build rows and advantages, update every engine, push the new weights, log."""
    started, compiled = time.perf_counter(), compile_seconds(run.policies)
    episodes, fed = rollout(run, step)
    rows = training_rows(run, episodes)
    rolled_out, compiling = time.perf_counter(), compile_seconds(run.policies) - compiled
    lr = next(p.engine.get_lr()[0] for p in run.policies.values() if p.engine is not None)
    sleep(run.policies)
    # a checkpointed step's rollouts go to OUT/traces.jsonl, with what the update did with each event
    traced = run.log is not None and due(step, run.opts.save_every, run.opts.steps)
    clips = torch.zeros(len(rows), 2, dtype=torch.float64) if traced else None
    stale = stale_rows(rows.versions, rows.policies, step - 1, run.feed.trained) if run.feed else None
    stats = update(
        run.policies, rows, run.opts, run.dist, run.temperatures, run.keys, clips, run.objective, stale
    )
    updated = time.perf_counter()
    sync_weights(run.policies)
    if run.feed is not None:
        run.feed.publish(run.policies, step)
    clock = StepClock(started, compiling, rolled_out, updated, synced=time.perf_counter())
    row = step_metrics(run, step, episodes, rows, stats, lr, clock) | memory_metrics(run.dist) | fed
    row |= decode_metrics(run.policies)
    if run.log is not None:
        updates = event_updates(rows.members, rows.advantages, clips) if clips is not None else {}
        run.log.step(row, episodes if traced else [], updates)
    return row


@dataclass(frozen=True)
class StepClock:
    """When a training step started, the seconds its rollouts spent compiling decode steps, and when its
    rollouts, its update and its weight push were done (`time.perf_counter` seconds)."""

    started: float
    compiling: float
    rolled_out: float
    updated: float
    synced: float


def due(step: int, every: int, last: int) -> bool:
    """Every `every` steps and at the last step."""
    return step % every == 0 or step == last


# --- the steps of one training step -------------------------------------------------------


def rollout(run: TrainingRun, step: int) -> tuple[list[Episode], dict[str, float]]:
    """This rank's share of the step's prompts (whole groups of G on one rank), G episodes each, generated
    here or received from a rollout worker (with the `async/` metrics). The draws' seeds follow from
    the step and each prompt's id (`Executor.run`), not from the rank or the process."""
    if run.feed is not None:
        return run.feed.batch(step)
    prompts = pick(run.tasks, step_prompts(len(run.tasks), run.opts.batch, step, run.opts.seed))
    mine = prompts[run.dist.rank :: run.dist.world_size]
    seed = seed_of("rollout", run.opts.seed, step)
    return run.executor.run(mine, samples=run.opts.group, seed=seed), {}


def training_rows(run: TrainingRun, episodes: list[Episode]) -> Rows:
    """One row per trained member (and resampled try) of every complete event with a trainable member,
    with its advantage; agents with `trained = false` have none."""
    untrained = [a.name for a in run.graph.agents.values() if not a.trained]
    rows = build_rows(episodes, run.objective, untrained)
    return rows.select(trainable_rows(rows, run.policies))


def trainable_rows(rows: Rows, policies: Mapping[str, TrainingPolicy]) -> list[int]:
    """Rows of events with at least one trainable member (an all-frozen event has no gradient)."""
    event_ids = rows.event_ids.tolist()
    events = {e for e, p in zip(event_ids, rows.policies) if policies[p].engine is not None}
    return [i for i, e in enumerate(event_ids) if e in events]


def sleep(policies: Mapping[str, TrainingPolicy]) -> None:
    """Before the update: the rollout engine of every trained engine releases its generation memory
    (frozen policies' engines stay awake: nothing of theirs changes)."""
    for p in engine_owners(policies).values():
        p.backend.sleep()


def memory_metrics(dist: Dist) -> dict[str, float]:
    """On CUDA, the step's peak GPU memory (GiB; allocated by torch on this rank), then reset."""
    if dist.device.type != "cuda":
        return {}
    peak = torch.cuda.max_memory_allocated(dist.device) / 2**30
    torch.cuda.reset_peak_memory_stats(dist.device)
    return {"memory/peak_gib": peak}


def step_metrics(
    run: TrainingRun,
    step: int,
    episodes: list[Episode],
    rows: Rows,
    stats: Mapping[str, float],
    lr: float,
    clock: StepClock,
) -> dict[str, float]:
    """The step's row of metrics.jsonl (global over ranks).

    The paper's training-dynamics panels, the step's time and its parts, then the metrics of each role
    and event type (`role_metrics.py`).
    """
    local = [len(episodes), sum(e.team_return for e in episodes), sum(e.reward for e in episodes)]
    local += [float(sum(rows.response_lengths)), rows.dropped_events, *step_sums(run.keys, episodes, rows)]
    n_episodes, team_return, reward, response_tokens, dropped, *by_key = all_reduce(local, run.dist.device)
    return (
        {
            "step": step,
            "return": team_return / max(n_episodes, 1),  # mean team return: reward + invalid-output penalty
            "task_score": reward / max(n_episodes, 1),  # mean reward: the reward function alone
            "grad_norm": stats.get("grad_norm", 0.0),
            "response_length": response_tokens / max(stats["num_rows"], 1),
            "mean_set_size": stats["num_rows"] / max(stats["num_events"], 1),
            "num_events": stats["num_events"],
            "dropped_events": dropped,
            "clip_fraction": stats.get("clip_fraction", 0.0),
            "lr": lr,
            "loss": stats.get("loss", 0.0),
            "time": clock.synced - clock.started,
            "time/rollout": clock.rolled_out - clock.started - clock.compiling,  # steady state
            "time/compile": clock.compiling,  # the first calls of new decode shapes
            "time/update": clock.updated - clock.rolled_out,
            "time/sync": clock.synced - clock.updated,
            "time/elapsed": clock.synced - run.began,
        }
        | keyed_metrics(run.keys, by_key, stats)
        | {k: v for k, v in stats.items() if k.startswith("importance_")}
    )


def evaluate(run: TrainingRun, step: int) -> JsonObject | None:
    """Held-out Avg@k, Pass@k (per dataset, macro mean), cost per episode, each role's invalid-output rate
    (k = eval_k samples per prompt, `heldout.py`); the per-prompt outcomes go to eval_prompts.jsonl."""
    if not any(s.tasks for s in run.eval_sets):
        return None
    opts = run.opts
    result = evaluate_sets(run.executor, run.eval_sets, opts.eval_k, opts.seed, step, run.dist, run.keys)
    row = result.row | {"time/elapsed": time.perf_counter() - run.began}  # once evaluated
    if run.log is not None:
        run.log.evaluation(row, result.prompts)
    return row


def checkpoint(run: TrainingRun, step: int) -> Path:
    state = {
        "step": step,
        "data_cursor": {"next_step": step + 1},
        "config": run.config,
        "graph_hash": run.graph.hash,
        "versions": {n: p.backend.version for n, p in run.policies.items()},
    }
    held = {"batches": run.feed.held_after(step)} if run.feed is not None else None  # asynchronous
    return save_checkpoint(run.out, step, run.policies, state, run.dist, held)


class StepBar(Protocol):
    """The steps to run, shown as they go (tqdm on a terminal, `srpo_dsl.progress.Lines` elsewhere)."""

    def __iter__(self) -> Iterator[int]: ...
    def set_postfix_str(self, s: str) -> None: ...


def progress_bar(run: TrainingRun, progress: bool) -> StepBar:
    """The steps still to run, with a progress bar on rank 0."""
    bar: StepBar = progress_lines(  # `progress` returns tqdm's bar or its own
        range(run.start + 1, run.opts.steps + 1),
        initial=run.start,
        total=run.opts.steps,
        desc="train",
        unit="step",
        enabled=progress and run.dist.rank == 0,
    )
    return bar
