"""A run whose update is not finite stops: the step is not taken, the last good step is checkpointed, one
line names both, exit 1; its metrics hold the good steps only, and no weights that are not finite are
exported."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.clitools import ROOT
from tests.support.objective import SRPO_AGAIN
from tests.support.runs import metrics
from tests.support.training import TEMPERATURES, build, make_episodes, parameters

NAN_AT_STEP_2 = (
    SRPO_AGAIN
    + '''
import dataclasses

CALLS = []


def nan_at_2(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """SRPO, whose terms turn NaN at the second call (one micro-batch and one epoch a step: step 2)."""
    CALLS.append(1)
    terms = loss(batch, config)
    if len(CALLS) == 2:
        return dataclasses.replace(terms, values=terms.values * float("nan"))
    return terms
'''
)


POISONED = (
    SRPO_AGAIN
    + '''
import dataclasses


def nan_loss(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    terms = loss(batch, config)
    return dataclasses.replace(terms, values=terms.values * float("nan"))


def nan_grad(batch: PolicyBatch, config: LossConfig) -> PolicyTerms:
    """The loss finite, its gradient NaN: `where` passes sqrt's NaN derivative on (0 * NaN)."""
    terms = loss(batch, config)
    x = -(batch.logprobs.sum().abs() + 1.0)
    return dataclasses.replace(terms, values=terms.values + torch.where(x > 0, x.sqrt(), 0.0))
'''
)


@pytest.mark.slow
@pytest.mark.parametrize("zero", [0, 2])
@pytest.mark.parametrize("poison", ["nan_loss", "nan_grad"])
def test_an_update_that_is_not_finite_moves_no_weight(tmp_path, models, dist, zero, poison) -> None:
    """A NaN loss stops before any engine steps; a NaN gradient too, at stage 0 by the norm taken before
    the step, under ZeRO by DeepSpeed's skip of the step (its norm then inf)."""
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.loop.update import NotFinite, update
    from srpo_dsl.rl.objective.plugins import training_objective
    from srpo_dsl.rl.objective.rows import build_rows

    (tmp_path / "poisoned.py").write_text(POISONED)
    options = {"objective": f"poisoned.py:{poison}", "aggregation": "event-mean", "advantage": "event"}
    objective = training_objective(TrainOptions(**options), tmp_path)
    rows = build_rows(make_episodes(mixed=True), objective)
    policies, opts = build({"a": models[0], "b": models[1]}, dist, zero=zero, micro_batches=2)
    before = parameters(policies)
    with pytest.raises(NotFinite) as stopped:
        update(policies, rows, opts, dist, TEMPERATURES, objective=objective)
    after = parameters(policies)
    assert all(torch.equal(before[k], after[k]) for k in before) and not stopped.value.applied
    if poison == "nan_loss":
        assert math.isnan(stopped.value.loss)
        assert (stopped.value.grad_norm is None) == (zero != 0)  # DeepSpeed's norm comes with its step
    else:
        assert math.isfinite(stopped.value.loss)
        assert stopped.value.grad_norm == (math.inf if zero else pytest.approx(math.nan, nan_ok=True))


def model_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    (path,) = checkpoint.rglob("*model_states.pt")
    return torch.load(path, map_location="cpu", weights_only=False)["module"]


@pytest.mark.slow
def test_a_nan_update_stops_the_run_at_the_last_good_step(tmp_path: Path) -> None:
    workflows = ROOT / "workflows"
    shutil.copy(workflows / "quickstart.srpo", tmp_path / "q.srpo")
    shutil.copytree(workflows / "quickstart", tmp_path / "quickstart")  # its templates, beside it
    (tmp_path / "nan_at.py").write_text(NAN_AT_STEP_2)
    out = tmp_path / "run"
    args = ["--steps", "4", "--batch", "2", "--group", "2", "--option", "save_every=10"]
    args += ["--option", "eval_size=2", "--option", "eval_k=1", "--option", "objective=nan_at.py:nan_at_2"]
    args += ["--option", "aggregation=event-mean", "--option", "advantage=event"]
    command = [sys.executable, "-m", "srpo_dsl", "train", "q.srpo", "--out", str(out), *args]
    r = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr[-3000:]
    assert r.stderr.endswith(
        "error: step 2: the update is not finite (loss nan, grad norm nan); the last good checkpoint is "
        f"step 1: {out / 'checkpoints' / 'step-1'} (check the rewards, the objective and the learning rate)\n"
    )
    assert [row["step"] for row in metrics(out)] == [1]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-1"]  # saved as the run stopped
    weights = model_weights(out / "checkpoints" / "step-1")
    assert all(bool(w.isfinite().all()) for w in weights.values())
    # a checkpoint holding NaN weights (as one taken after such a step would) is not exported
    shutil.copytree(out / "checkpoints" / "step-1", out / "checkpoints" / "step-2")
    (path,) = (out / "checkpoints" / "step-2").rglob("*model_states.pt")
    state = torch.load(path, map_location="cpu", weights_only=False)
    state["module"] = {k: v * float("nan") for k, v in state["module"].items()}
    torch.save(state, path)
    export = [sys.executable, "-m", "srpo_dsl", "export", str(out), "--out", str(tmp_path / "export")]
    refused = subprocess.run(export, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and refused.stderr.startswith(
        f"error: {out / 'checkpoints' / 'step-2'}"
    ), refused.stderr
    assert "holds weights that are not finite (" in refused.stderr and not (tmp_path / "export").exists()
