"""One training update: event-atomic micro-batches, the objective's token weights, one backward per engine.

Micro-batches hold whole events; for an objective whose terms are over episodes (`episode-mean`:
traj) whole episodes.

The update is exact for events whose members come from different trainable policies
(docs/objective.md §3, the gradient view):

    W      = d(loss)/d(logprobs)        on a DETACHED [B, T] log-prob tensor (autograd)
    loss_p = sum(W_p * logprobs_p)      back-propagated through policy p's own engine

The loss is normalised by the GLOBAL event (token, row, episode) count of the optimizer step, and
each engine's backward is scaled by the world size (DeepSpeed averages gradients over
ranks) without DeepSpeed's 1/gradient_accumulation_steps, so neither the micro-batch nor
the rank layout changes the update. Every rank runs the same forwards per engine in the
same order (an empty group runs a zero-weight dummy row), as ZeRO's collectives require.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from srpo_dsl.backends.logprobs import Scoring, response_logprobs
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.compile.graph import BASE_ADAPTER
from srpo_dsl.rl.distributed.process_group import Dist, all_gather, all_reduce
from srpo_dsl.rl.engines.adapters import clip_per_adapter
from srpo_dsl.rl.engines.ds_engine import norm_after_step, norm_before_step
from srpo_dsl.rl.engines.policies import TrainingPolicy, checkpoint_layers, engine_owners
from srpo_dsl.rl.loop.role_metrics import MetricKeys
from srpo_dsl.rl.objective.aggregation import get_aggregation
from srpo_dsl.rl.objective.batching import budget_batches, linked_atoms, plan_batches
from srpo_dsl.rl.objective.losses import Objective, get_objective
from srpo_dsl.rl.objective.rows import Rows, followed_within
from srpo_dsl.rl.objective.setwise import behavior_of_rows


class NotFinite(Exception):
    """An optimizer step whose loss or gradient norm is not finite: not taken. `grad_norm` is None where
    the step stopped before it was computed; `applied`: the weights moved anyway (an earlier epoch's step
    of the update, or an engine that stepped before another's norm turned out not finite)."""

    def __init__(self, loss: float, grad_norm: float | None, applied: bool):
        norm = "" if grad_norm is None else f", grad norm {grad_norm:.4g}"
        super().__init__(f"the update is not finite (loss {loss:.4g}{norm})")
        self.loss, self.grad_norm, self.applied = loss, grad_norm, applied


Temperatures = Mapping[str, Mapping[str, float]]  # policy -> role -> sampling temperature
Group = tuple[str, float]  # (engine, temperature): one forward per micro-batch (adapters on a base: one)


def pad_right(values: Sequence[Sequence[float]], width: int) -> Tensor:
    """[N, width] float32, zero-padded rows."""
    out = torch.zeros(len(values), width)
    lengths = torch.tensor([len(v) for v in values], dtype=torch.long)
    mask = torch.arange(width) < lengths[:, None]
    if mask.any():
        out[mask] = torch.tensor([x for v in values for x in v], dtype=torch.float32)
    return out


@dataclass(frozen=True)
class UpdateBatch:
    """One step's rows as response-aligned tensors; `temperatures[i]` is row i's sampling temperature,
    `engines[i]` the engine that trains it (None: frozen), `adapters[i]` its peft adapter (None: none).
    Built on the CPU (`of`); `on` moves it to the update's device with what the update scored first."""

    rows: Rows
    mask: Tensor  # [N, T] bool, generated tokens
    behavior_logprobs: Tensor  # [N, T] log mu: what the rollout recorded
    temperatures: list[float]
    engines: list[str | None]
    adapters: list[str | None]
    old_logprobs: Tensor | None = None  # [N, T]; None: the update's own first-epoch log-probs are the old
    ref_logprobs: Tensor | None = None  # [N, T] reference log-probs for the KL penalty
    stale: Tensor | None = None  # [N] bool: rows whose behavior policy is older than the proximal

    def on(
        self, device: torch.device, old: Tensor | None, ref: Tensor | None, stale: Tensor | None
    ) -> UpdateBatch:
        """This batch on `device` (its rows' event and episode ids and advantages too), with the old and
        reference log-probs and the stale rows."""
        rows = self.rows
        ids = {"event_ids": rows.event_ids, "episode_ids": rows.episode_ids, "advantages": rows.advantages}
        moved = replace(rows, **{name: t.to(device) for name, t in ids.items()})
        mask, behavior = self.mask.to(device), self.behavior_logprobs.to(device)
        tensors = {"mask": mask, "behavior_logprobs": behavior, "old_logprobs": old, "ref_logprobs": ref}
        return replace(self, rows=moved, stale=stale, **tensors)

    @classmethod
    def of(
        cls, rows: Rows, temperatures: Temperatures, policies: Mapping[str, TrainingPolicy] | None = None
    ) -> UpdateBatch:
        """Without `policies`, every policy is trainable by an engine of its own."""
        lengths = torch.tensor(rows.response_lengths, dtype=torch.long)
        width = max(1, int(lengths.max())) if len(rows) else 1
        mask = torch.arange(width) < lengths[:, None]
        behavior = pad_right(rows.behavior_logprobs, width)
        row_temperatures = [temperatures[p][r] for p, r in zip(rows.policies, rows.roles)]
        if policies is None:
            return cls(rows, mask, behavior, row_temperatures, list(rows.policies), [None] * len(rows))
        engines = [
            policies[p].engine_owner if policies[p].engine is not None else None for p in rows.policies
        ]
        adapters = [policies[p].adapter for p in rows.policies]
        return cls(rows, mask, behavior, row_temperatures, engines, adapters)

    def members_of(self, micro: Sequence[int], group: Group) -> list[int]:
        """Positions in `micro` of the rows scored by (engine, temperature)."""
        engine, temperature = group
        return [
            j
            for j, i in enumerate(micro)
            if self.engines[i] == engine and self.temperatures[i] == temperature
        ]


def forward_groups(policies: Mapping[str, TrainingPolicy], temperatures: Temperatures) -> list[Group]:
    """(engine, temperature) of the trainable engines: one forward each per micro-batch, rank-wide order
    (an engine's temperatures are those of all its policies)."""
    used: dict[str, set[float]] = {}
    for name, nodes in temperatures.items():
        if policies[name].engine is not None:
            used.setdefault(policies[name].engine_owner, set()).update(nodes.values())
    return [(owner, t) for owner in sorted(used) for t in sorted(used[owner])]


def score_group(
    policy: TrainingPolicy,
    batch: UpdateBatch,
    index: list[int],
    temperature: float,
    device: torch.device,
    with_entropy: bool = False,
    reference: bool = False,
    scoring: Scoring = "cached",
) -> tuple[Tensor, Tensor | None]:
    """[len(index), W] log-probs (and entropies) of the rows at `index` by `policy`'s engine (or its frozen
    reference), each row through its own adapter; a 1-token dummy row when empty. `scoring`: how the model
    runs over the rows (`backends.logprobs.SCORINGS`; packed, a conversation's rows in one pass)."""
    model = policy.reference if reference else policy.model
    if model is None:
        raise ValueError(f"policy {policy.name} has no reference model (a KL penalty of 0)")
    options = {"with_entropy": with_entropy, "scoring": scoring}
    if not index:
        dummy = [[policy.pad_id]]
        return response_logprobs(model, dummy, dummy, policy.pad_id, 1.0, device, **options)
    order, names = list(range(len(index))), None
    if policy.adapter is not None:
        # each adapter's rows together (LoRA runs over row blocks), then back in `index` order; the
        # reference of an adapter is its base: no adapter
        row_names = [BASE_ADAPTER if reference else batch.adapters[i] or BASE_ADAPTER for i in index]
        order = sorted(order, key=lambda k: row_names[k])
        names = [row_names[k] for k in order]
    rows = [index[k] for k in order]
    if scoring == "packed":
        options["follows"] = followed_within(batch.rows.follows, rows)
    prompts = [batch.rows.prompt_token_ids[i] for i in rows]
    responses = [batch.rows.response_token_ids[i] for i in rows]
    logprobs, entropy = response_logprobs(
        model, prompts, responses, policy.pad_id, temperature, device, adapters=names, **options
    )
    if names is None:
        return logprobs, entropy
    back = torch.argsort(torch.tensor(order, device=logprobs.device))
    return logprobs[back], entropy[back] if entropy is not None else None


@torch.no_grad()
def score_rows(
    leads: Mapping[str, TrainingPolicy],
    batch: UpdateBatch,
    plan: list[list[int]],
    groups: list[Group],
    device: torch.device,
    reference: bool = False,
    scoring: Scoring = "cached",
) -> Tensor:
    """[N, T] log-probs of every trainable row (current or reference weights), behavior elsewhere;
    `scoring`: `packed` (a conversation in one pass) or `cached` (no gradient: no checkpointing to mind).

    Follows the micro-batch plan so every rank runs the same forwards (ZeRO-3 gathers).
    """
    out = batch.behavior_logprobs.clone().to(device)
    for micro in plan:
        for group in groups:
            pos = batch.members_of(micro, group)
            policy = leads[group[0]]
            if reference and not pos and policy.adapter is None:
                continue  # a plain module: no collectives to keep in step (an adapter's is the engine's)
            index = [micro[j] for j in pos]
            logprobs, _ = score_group(
                policy, batch, index, group[1], device, reference=reference, scoring=scoring
            )
            if pos:
                out[torch.tensor(index, device=device), : logprobs.shape[1]] = logprobs
    return torch.where(batch.mask.to(device), out, 0.0)


@dataclass(frozen=True)
class Counts:
    """The GLOBAL counts of the optimizer step (summed over ranks): the objective's denominators."""

    events: int
    tokens: int
    rows: int
    episodes: int


@dataclass(frozen=True)
class Step:
    """What every micro-batch of one update reads: the data (`batch`, on the device) and how to train it."""

    leads: Mapping[str, TrainingPolicy]  # engine -> a policy it trains (`engine_owners`)
    batch: UpdateBatch
    opts: TrainOptions
    objective: Objective
    dist: Dist
    groups: list[Group]
    counts: Counts


@dataclass(frozen=True)
class ScoredGroup:
    """One forward of a (policy, temperature) group over its rows of a micro-batch."""

    pos: list[int]  # positions in the micro-batch; empty: `logprobs` is the dummy row
    logprobs: Tensor  # [len(pos), W_g], differentiable
    entropy: Tensor | None


@dataclass(frozen=True)
class MicroStats:
    loss: float
    clips: Tensor  # [rows, 2] (clipped units, units): events for srpo, tokens for grpo/drmas, rows for seq
    importance: tuple[float, float, float] = (0.0, 0.0, 0.0)  # off-policy: (sum of w, capped units, units)


def scoring_of(opts: TrainOptions) -> Scoring:
    """How the update runs the model over a micro-batch's rows: `pack_rows` packs them without padding;
    checkpointed layers keep no KV cache (one padded pass per row); else each distinct prompt once, and
    the responses on its cache."""
    if opts.pack_rows:
        return "packed"
    return "uncached" if opts.gradient_checkpointing else "cached"


def score_micro(s: Step, micro: list[int]) -> dict[Group, ScoredGroup]:
    """Every group's forward over its rows of `micro` (with grad): the same forwards on every rank."""
    out = {}
    for group in s.groups:
        pos = s.batch.members_of(micro, group)
        index = [micro[j] for j in pos]
        logprobs, entropy = score_group(
            s.leads[group[0]],
            s.batch,
            index,
            group[1],
            s.dist.device,
            s.opts.entropy > 0,
            scoring=scoring_of(s.opts),
        )
        out[group] = ScoredGroup(pos, logprobs, entropy)
    return out


def token_weights(s: Step, idx: Tensor, logprobs: Tensor, old: Tensor) -> tuple[Tensor, MicroStats]:
    """(W, stats) of the micro-batch rows `idx`: W = d(loss)/d(logprobs) on detached log-probs.

    stats: the loss, (clipped units, units) per row of the objective's clipping unit, and with stale
    rows the importance weights' sum, capped units and units.
    """
    width = logprobs.shape[1]
    logprobs = logprobs.detach().requires_grad_(True)
    behavior = None  # off-policy rows are corrected against what generated them; fresh rows: w = 1
    if s.batch.stale is not None:
        behavior = behavior_of_rows(s.batch.stale[idx], s.batch.behavior_logprobs[idx, :width], old)
    loss, metrics, terms = s.objective.evaluate(
        logprobs,
        old,
        s.batch.mask[idx, :width],
        s.batch.rows.event_ids[idx],
        s.batch.rows.advantages[idx],
        clip_eps=s.opts.clip,
        set_norm=s.opts.set_norm,
        num_events=s.counts.events,
        num_tokens=s.counts.tokens,
        num_rows=s.counts.rows,
        ref_logprobs=None if s.batch.ref_logprobs is None else s.batch.ref_logprobs[idx, :width],
        kl_coef=s.opts.kl,
        behavior_logprobs=behavior,
        importance_cap=s.opts.importance_cap,
        episode_ids=s.batch.rows.episode_ids[idx],
        num_episodes=s.counts.episodes,
    )
    (weights,) = torch.autograd.grad(loss, logprobs)
    units = metrics["num_units"]
    importance = (0.0, 0.0, 0.0)
    if "importance_weight_mean" in metrics:
        importance = (
            metrics["importance_weight_mean"] * units,
            metrics["importance_capped_fraction"] * units,
            units,
        )
    return weights, MicroStats(
        loss.item(), terms.row_clips(len(idx), s.batch.rows.event_ids[idx]), importance
    )


def micro_logprobs(
    s: Step, idx: Tensor, width: int, scored: Mapping[Group, ScoredGroup]
) -> tuple[Tensor, Tensor]:
    """(current, old) [M, width] log-probs of the micro-batch, detached; frozen rows keep their old ones."""
    old = s.batch.old_logprobs[idx, :width] if s.batch.old_logprobs is not None else None
    current = old.clone() if old is not None else torch.zeros(len(idx), width, device=s.dist.device)
    for sc in scored.values():
        if sc.pos:
            current[sc.pos, : sc.logprobs.shape[1]] = sc.logprobs.detach()
    return current, old if old is not None else current.clone()


def entropy_bonus(s: Step, idx: Tensor, sc: ScoredGroup) -> Tensor:
    """-c * sum(mask * H) / |tokens| of one group: linear in H, so H itself is its surrogate."""
    if s.opts.entropy == 0 or not sc.pos or sc.entropy is None:
        return torch.zeros((), device=s.dist.device)
    mask = s.batch.mask[idx][sc.pos, : sc.entropy.shape[1]]
    return (-s.opts.entropy / s.counts.tokens) * torch.where(mask, sc.entropy, 0.0).sum()


def backward_engines(
    s: Step,
    scored: Mapping[Group, ScoredGroup],
    weights: Tensor,
    bonus: Mapping[Group, Tensor],
    loss: float | None,
) -> dict[str, float]:
    """Per engine: backward of sum(W_p * logprobs_p) over its rows (+ their entropy bonus). At the
    boundary (`loss`: the optimizer step's, over ranks; None before it) every engine steps, unless the
    update is not finite (`boundary_step`). Adapters on one base share an engine: one backward, one step."""
    owners = sorted({g[0] for g in s.groups})
    for owner in owners:
        parts = [(g, sc) for g, sc in scored.items() if g[0] == owner]
        terms = [_surrogate(sc, weights) + bonus[g] for g, sc in parts]
        surrogate = sum(terms[1:], terms[0])
        engine = s.leads[owner].trained_engine
        engine.backward(surrogate * s.dist.world_size, scale_wrt_gas=False)  # DeepSpeed averages over ranks
        if loss is None:
            engine.step()
    return {} if loss is None else boundary_step(s, owners, loss)


def boundary_step(s: Step, owners: list[str], loss: float) -> dict[str, float]:
    """The optimizer step of every engine; its gradient norms before clipping. A loss or a norm that is
    not finite stops it with `NotFinite` before any engine steps where the norm is known first (ZeRO
    stage 0 in fp32, adapters: each clipped alone); a norm DeepSpeed reports after its step is not
    finite only where it skipped the step (ZeRO 1-3, bf16), which `applied` says."""
    norms = {}
    for owner in owners:
        policy = s.leads[owner]
        if policy.adapters:
            norms[owner] = clip_per_adapter(policy.trained_engine.module, policy.adapters, s.opts.grad_clip)
        else:
            norms[owner] = norm_before_step(policy.trained_engine)
    known = [n for n in norms.values() if n is not None]
    if not math.isfinite(loss) or not all(map(math.isfinite, known)):
        raise NotFinite(loss, math.sqrt(sum(n**2 for n in known)) if known else None, applied=False)
    for owner in owners:
        engine = s.leads[owner].trained_engine
        engine.step()
        norms[owner] = norms[owner] if norms[owner] is not None else norm_after_step(engine)
    total = math.sqrt(sum(n**2 for n in norms.values()))
    if not math.isfinite(total):
        applied = any(s.leads[o].trained_engine.was_step_applied() for o in owners)
        raise NotFinite(loss, total, applied=applied)
    return norms


def _surrogate(sc: ScoredGroup, weights: Tensor) -> Tensor:
    """sum(W * logprobs) over the group's rows; an empty group adds 0 x its dummy row (keeps ZeRO in step)."""
    if not sc.pos:
        return 0.0 * sc.logprobs.sum()
    return (weights[sc.pos, : sc.logprobs.shape[1]] * sc.logprobs).sum()


def micro_step(s: Step, micro: list[int], last: bool, before: float) -> tuple[MicroStats, dict[str, float]]:
    """Score one event-atomic micro-batch, weight its tokens by the objective, back-propagate per engine;
    `before`: the loss of the step's earlier micro-batches (the last one's step checks the sum over ranks)."""
    device = s.dist.device
    for policy in s.leads.values():  # the boundary is the plan's last micro-batch, however many it has
        policy.trained_engine.set_gradient_accumulation_boundary(last)
    idx = torch.tensor(micro, dtype=torch.long, device=device)
    width = max(1, int(s.batch.mask[idx].sum(-1).max())) if micro else 1
    scored = score_micro(s, micro)
    bonus = {g: entropy_bonus(s, idx, sc) for g, sc in scored.items()}
    loss = sum(b.item() for b in bonus.values())
    weights = torch.zeros(len(micro), width, device=device)
    stats = MicroStats(0.0, torch.zeros(len(micro), 2, dtype=torch.float64, device=device))
    if micro:
        current, old = micro_logprobs(s, idx, width, scored)
        weights, stats = token_weights(s, idx, current, old)
    loss += stats.loss
    total = all_reduce([before + loss], device)[0] if last else None  # every rank decides alike
    norms = backward_engines(s, scored, weights, bonus, total)
    return MicroStats(loss, stats.clips, stats.importance), norms


def run_epoch(s: Step, plan: list[list[int]]) -> tuple[MicroStats, float]:
    """One optimizer step of every engine over the micro-batch `plan`; (stats of every row, grad norm)."""
    loss, norms, importance = 0.0, {}, [0.0, 0.0, 0.0]
    clips = torch.zeros(s.batch.mask.shape[0], 2, dtype=torch.float64, device=s.dist.device)
    for m, micro in enumerate(plan):
        micro_stats, micro_norms = micro_step(s, micro, m == len(plan) - 1, loss)
        loss += micro_stats.loss
        clips[micro] = micro_stats.clips
        importance = [a + b for a, b in zip(importance, micro_stats.importance)]
        norms.update(micro_norms)
    return MicroStats(loss, clips, tuple(importance)), math.sqrt(sum(n**2 for n in norms.values()))


def old_logprobs(
    leads: Mapping[str, TrainingPolicy],
    batch: UpdateBatch,
    plan: list[list[int]],
    groups: list[Group],
    opts: TrainOptions,
    device: torch.device,
) -> Tensor | None:
    """The old log-probs of the ratio: rollout's, recomputed, or (None) the update's own at one epoch.

    With one epoch the weights cannot move before each row is scored (gradient accumulation
    steps only at the boundary), so the update's own detached log-probs ARE the recomputed
    old log-probs: no extra no-grad pass (exact; modules run without dropout).
    """
    if opts.old_logprobs == "rollout":
        return batch.behavior_logprobs.to(device)
    if opts.epochs == 1:
        return None
    return score_rows(leads, batch, plan, groups, device, scoring=_no_grad_scoring(opts))


def _no_grad_scoring(opts: TrainOptions) -> Scoring:
    """How the no-grad passes (old and reference log-probs) run the model: packed as the update is, else
    each distinct prompt once (they keep no activations: checkpointing is not theirs)."""
    return "packed" if opts.pack_rows else "cached"


def micro_plan(atoms: list[int], tokens: list[int], opts: TrainOptions) -> list[list[int]]:
    """This rank's micro-batches: `micro_batches` of them balanced by tokens, or as many as the token budget
    needs (`max_tokens_per_micro_batch`). Every rank runs as many as the rank that needs most (the others
    run empty ones: each micro-batch is collective under ZeRO)."""
    if opts.max_tokens_per_micro_batch is None:
        return plan_batches(atoms, tokens, world_size=1, micro_batches=opts.micro_batches)[0]
    plan = budget_batches(atoms, tokens, opts.max_tokens_per_micro_batch, padded=not opts.pack_rows)
    most = max(all_gather(len(plan)))
    return plan + [[] for _ in range(most - len(plan))]


def atomic_ids(rows: Rows, objective: Objective, packed: bool = False) -> list[int]:
    """The ids whose rows must share a micro-batch: episodes when the objective's terms are over
    episodes (its aggregation counts them: traj), else events; `packed`, merged over the rows of one
    conversation (`Rows.follows`), which packed scoring runs as one sequence (`linked_atoms`). Scored row
    by row, a conversation is not kept together: its micro-batches would hold its every turn, padded."""
    over_episodes = get_aggregation(objective.aggregation).count == "num_episodes"
    atoms = (rows.episode_ids if over_episodes else rows.event_ids).tolist()
    return linked_atoms(atoms, rows.follows) if packed else atoms


def corrected_rows(stale: Tensor | None, opts: TrainOptions, device: torch.device) -> Tensor | None:
    """The stale rows on the device, or None when nothing is corrected: no stale row, or old log-probs
    taken from the rollout (the ratio is then against the behavior policy itself: no weight)."""
    if stale is None or opts.old_logprobs == "rollout" or not stale.any():
        return None
    return stale.to(device)


def update(
    policies: Mapping[str, TrainingPolicy],
    rows: Rows,
    opts: TrainOptions,
    dist: Dist,
    temperatures: Temperatures,
    keys: MetricKeys | None = None,
    row_clips: Tensor | None = None,
    objective: Objective | None = None,
    stale: Tensor | None = None,
) -> dict[str, float]:
    """`opts.epochs` optimizer steps of every engine on this rank's `rows` (collective over ranks).

    Returns loss, grad_norm, clip_fraction (means over epochs) and the global counts; with
    `keys`, also the clip fraction of each role and event type (`role/R/clip_fraction`, ...).
    A given `row_clips` ([N, 2] float64, zeros) receives each row's (clipped units, units) over
    every epoch, for the traces (`rl/loop/event_updates.py`; a set counted once per event it spans).
    `objective`: default the registered `opts.objective` (`rl/objective/plugins.py` builds one as the options
    name it). `stale`: [N] bool, the rows
    generated with weights older than the proximal policy's (asynchronous rollouts): their events are
    corrected by a truncated importance weight (docs/objective.md), when the old log-probs are recomputed.
    """
    device = dist.device
    batch = UpdateBatch.of(rows, temperatures, policies)
    groups = forward_groups(policies, temperatures)
    leads = engine_owners(policies)
    if opts.gradient_checkpointing:
        for lead in leads.values():
            checkpoint_layers(lead.trained_engine.module)
    objective = objective or get_objective(opts.objective)
    tokens = rows.new_tokens if opts.pack_rows else rows.lengths  # packed: a conversation's length once
    plan = micro_plan(
        atomic_ids(rows, objective, bool(opts.pack_rows)), tokens, opts
    )  # whole events (episodes for traj)
    local = [rows.num_events, float(batch.mask.sum()), len(rows), rows.num_episodes]
    counts = Counts(*(int(n) for n in all_reduce(local, device)))
    if counts.events == 0:
        return {"num_events": 0.0, "num_rows": 0.0, "num_tokens": 0.0}
    old = old_logprobs(leads, batch, plan, groups, opts, device)
    ref = None
    if opts.kl > 0:
        ref = score_rows(leads, batch, plan, groups, device, reference=True, scoring=_no_grad_scoring(opts))
    batch = batch.on(device, old, ref, corrected_rows(stale, opts, device))
    s = Step(leads, batch, opts, objective, dist, groups, counts)
    epochs: list[tuple[MicroStats, float]] = []
    for _ in range(opts.epochs):
        try:
            epochs.append(run_epoch(s, plan))
        except NotFinite as exc:
            exc.applied = exc.applied or bool(epochs)  # an earlier epoch stepped
            raise
    clips = sum(t.clips for t, _ in epochs)  # [N, 2] over every epoch
    if row_clips is not None:
        row_clips.copy_(clips)
    return update_metrics(epochs, clips, rows, counts, keys, device)


def update_metrics(
    epochs: list[tuple[MicroStats, float]],
    clips: Tensor,
    rows: Rows,
    counts: Counts,
    keys: MetricKeys | None,
    device: torch.device,
) -> dict[str, float]:
    """Over ranks: loss and grad norm (means over epochs), clip fraction (with `keys`, also per role and
    event type), the counts, and with off-policy rows their importance weights' mean and capped fraction."""
    by_key = keys.sums(clips, rows.roles, clips, rows.event_types).flatten().tolist() if keys else []
    importance = [sum(t.importance[i] for t, _ in epochs) for i in range(3)]
    loss, clipped, weight, w_sum, capped, units, *by_key = all_reduce(
        [sum(t.loss for t, _ in epochs), *clips.sum(0).tolist(), *importance, *by_key], device
    )
    metrics = {
        "loss": loss / len(epochs),
        "grad_norm": sum(norm for _, norm in epochs) / len(epochs),
        "clip_fraction": clipped / max(weight, 1e-12),
        "num_events": float(counts.events),
        "num_tokens": float(counts.tokens),
        "num_rows": float(counts.rows),
    }
    if units:
        metrics |= {"importance_weight_mean": w_sum / units, "importance_capped_fraction": capped / units}
    return metrics | (keys.ratios("clip_fraction", by_key) if keys else {})
