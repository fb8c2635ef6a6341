"""A user's objective and advantage estimator by Python reference: the shipped worked example (GSPO)
against a hand-computed value, a plugin re-implementing `srpo` against the built-in's gradients, the
`ast` checks of validate (positioned at the string) and the checks of what a plugin returns."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from srpo_dsl.lang import analyze, load_graph
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.rl.objective.losses import get_objective
from srpo_dsl.rl.objective.plugins import training_objective
from srpo_dsl.runtime.usercode import UserCodeError
from tests.support.objective import SRPO_AGAIN, random_batch
from tests.support.training import TEMPERATURES, build, make_episodes, make_models, parameters

ROOT = Path(__file__).resolve().parents[2]
GSPO = ROOT / "workflows" / "gspo.srpo"


ESTIMATORS = '''
import torch


def centred(inputs, eps):
    """Dr. GRPO's advantages: the return minus its prompt's mean, no division by the std."""
    prompts = sorted(set(inputs.prompt_ids))
    mean = {p: inputs.returns[[q == p for q in inputs.prompt_ids]].mean() for p in prompts}
    return inputs.returns - torch.stack([mean[p] for p in inputs.prompt_ids])


def too_short(inputs, eps):
    return inputs.returns[:1]


def two_args_missing(inputs):
    return inputs.returns
'''


def plugin_folder(tmp_path: Path) -> Path:
    (tmp_path / "srpo_again.py").write_text(SRPO_AGAIN)
    (tmp_path / "estimators.py").write_text(ESTIMATORS)
    return tmp_path


# --- the worked example: GSPO ------------------------------------------------------------------

PAD = -1e9
# Row 0: token log-ratios 0.2, 0.0     -> log s = 0.1, A = +1   : unclipped, term e^0.1
# Row 1: token log-ratios 0.3, 0, 0.3  -> log s = 0.2, A = -0.5 : min(-0.5 e^0.2, -0.5 * 1.2) = -0.5 e^0.2
# Row 2: token log-ratio 0.5           -> log s = 0.5, A = +2   : clipped, term 1.2 * 2 = 2.4, no gradient
GSPO_LP = [[-1.0, -0.5, PAD], [-0.3, -0.9, -0.1], [-1.0, PAD, PAD]]
GSPO_OLD = [[-1.2, -0.5, PAD], [-0.6, -0.9, -0.4], [-1.5, PAD, PAD]]
GSPO_MASK = [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
GSPO_ADV = [1.0, -0.5, 2.0]


def gspo_batch():
    lp = torch.tensor(GSPO_LP, dtype=torch.float64, requires_grad=True)
    old, adv = torch.tensor(GSPO_OLD, dtype=torch.float64), torch.tensor(GSPO_ADV, dtype=torch.float64)
    return lp, old, torch.tensor(GSPO_MASK).bool(), torch.arange(3), adv


def test_the_shipped_gspo_workflow_trains_on_the_plugin_it_names() -> None:
    graph = load_graph(GSPO)
    objective = training_objective(graph.train, GSPO.parent)
    assert (objective.name, objective.aggregation, objective.advantage) == (
        "plugins/gspo.py:loss",
        "row-mean",
        "row",
    )
    assert [(ref.use, ref.function) for ref in graph.code] == [("objective", "loss")]


def test_gspo_equals_its_hand_computed_value_and_gradient() -> None:
    objective = training_objective(load_graph(GSPO).train, GSPO.parent)
    lp, old, mask, events, adv = gspo_batch()
    loss, metrics = objective(lp, old, mask, events, adv, clip_eps=0.2)
    j = (math.exp(0.1) * 1.0 + math.exp(0.2) * -0.5 + 1.2 * 2.0) / 3
    assert loss.item() == pytest.approx(-j, abs=1e-12)
    assert metrics["clip_fraction"] == pytest.approx(1 / 3) and metrics["num_rows"] == 3
    (grad,) = torch.autograd.grad(loss, lp)
    # d(-J)/d logprob of each token: -(1/3) * A * s * (1 / |y|); the clipped row: 0
    row0, row1 = -(1 / 3) * 1.0 * math.exp(0.1) / 2, -(1 / 3) * -0.5 * math.exp(0.2) / 3
    expected = torch.tensor([[row0, row0, 0.0], [row1, row1, row1], [0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(grad, expected, rtol=0, atol=1e-12)
    global_loss, _ = objective(*gspo_batch(), clip_eps=0.2, num_rows=6)  # a share of 6 rows over ranks
    assert global_loss.item() == pytest.approx(-j * 3 / 6, abs=1e-12)


# --- a plugin re-implementing srpo is the built-in -----------------------------------------------


@pytest.mark.parametrize("set_norm", ["sqrt", "mean", "none"])
def test_a_plugin_reimplementing_srpo_gives_the_builtin_gradients(tmp_path: Path, set_norm: str) -> None:
    opts = TrainOptions(objective="srpo_again.py:loss", aggregation="event-mean", advantage="event")
    plugin = training_objective(opts, plugin_folder(tmp_path))
    builtin = get_objective("srpo")
    for seed in range(3):
        lp, old, mask, events, adv = random_batch(seed)
        kwargs = {"clip_eps": 0.1, "set_norm": set_norm, "num_events": 50}
        want, want_metrics = builtin(lp, old, mask, events, adv, **kwargs)
        got, got_metrics = plugin(lp, old, mask, events, adv, **kwargs)
        (want_grad,) = torch.autograd.grad(want, lp)
        (got_grad,) = torch.autograd.grad(got, lp)
        assert got.item() == pytest.approx(want.item(), abs=1e-6)
        torch.testing.assert_close(got_grad, want_grad, rtol=0, atol=1e-6)
        assert got_metrics == pytest.approx(want_metrics)


@pytest.mark.slow
def test_an_update_with_the_srpo_plugin_moves_the_weights_as_the_builtin(tmp_path: Path, dist) -> None:
    from srpo_dsl.rl.loop.update import update
    from srpo_dsl.rl.objective.rows import build_rows

    models = make_models(tmp_path)
    opts = TrainOptions(objective="srpo_again.py:loss", aggregation="event-mean", advantage="event")
    plugin = training_objective(opts, plugin_folder(tmp_path))
    rows = build_rows(make_episodes(mixed=True), plugin)
    torch.testing.assert_close(rows.advantages, build_rows(make_episodes(mixed=True), "srpo").advantages)
    moved = []
    for objective in (None, plugin):  # SGD(lr 1): the parameters show the gradients; 2 epochs: clipping
        policies, options = build({"a": models[0], "b": models[1]}, dist, epochs=2, micro_batches=2)
        stats = update(policies, rows, options, dist, TEMPERATURES, objective=objective)
        moved.append((parameters(policies), stats))
    (want, want_stats), (got, got_stats) = moved
    assert max((want[k] - got[k]).abs().max().item() for k in want) <= 1e-6
    assert got_stats["clip_fraction"] == want_stats["clip_fraction"] > 0


# --- advantage estimators by reference --------------------------------------------------------------


def test_a_python_estimator_replaces_the_objectives_own(tmp_path: Path) -> None:
    from srpo_dsl.rl.objective.advantages import AdvantageInputs

    opts = TrainOptions(objective="grpo", advantage="estimators.py:centred")
    objective = training_objective(opts, plugin_folder(tmp_path))
    assert (objective.name, objective.aggregation, objective.advantage) == (
        "grpo",
        "token-mean",
        "estimators.py:centred",
    )
    returns = torch.tensor([1.0, 0.0, 0.5, 2.0])  # prompt p: mean 0.5; prompt q: mean 1.25
    inputs = AdvantageInputs(returns, torch.arange(4), ["p", "p", "q", "q"], ["t"] * 4, ["r"] * 4)
    torch.testing.assert_close(objective.advantages(inputs), torch.tensor([0.5, -0.5, -0.75, 0.75]))


def test_what_a_plugin_returns_is_checked_with_its_file_and_line(tmp_path: Path) -> None:
    from srpo_dsl.rl.objective.advantages import AdvantageInputs

    folder = plugin_folder(tmp_path)
    inputs = AdvantageInputs(torch.zeros(2), torch.arange(2), ["p", "p"], ["t", "t"], ["r", "r"])
    short = training_objective(TrainOptions(advantage="estimators.py:too_short"), folder)
    with pytest.raises(
        UserCodeError,
        match=r"estimators.py:\d+: too_short\(\) returned a torch.float32 Tensor of shape \(1,\) for 2 rows",
    ):
        short.advantages(inputs)
    (folder / "flat.py").write_text(
        "from srpo_dsl.rl.objective.setwise import clipped_terms, token_log_ratio\n\n\ndef loss(batch, config):\n    r = token_log_ratio(batch).sum(-1)\n    return clipped_terms(r, batch.advantages, config.clip_eps, r > -1)\n"
    )
    flat = training_objective(TrainOptions(objective="flat.py:loss", aggregation="token-mean"), folder)
    with pytest.raises(
        UserCodeError,
        match=r"flat.py:4: loss\(\) returned terms of shape \(4,\), but its aggregation `token-mean` sums 2-d terms",
    ):
        flat(*random_batch(0, rows=4))
    with pytest.raises(
        ValueError, match=r"training option `advantage` = 'estimators.py:two_args_missing': error\[E094\]"
    ):
        training_objective(TrainOptions(advantage="estimators.py:two_args_missing"), folder)


# --- validate: read with ast, errors at the string ------------------------------------------------

WORKFLOW = """workflow w
policy lm = hf("m")
task arith()
agent a uses lm prompt "p.j2" emits boxed
aggregate a
reward exact_match(a, task.answer)
train with (objective = {objective}, aggregation = "event-mean", advantage = {advantage})
"""


def diagnostics(folder: Path, objective: str, advantage: str = "event") -> list:
    (folder / "p.j2").write_text("{{ task.question }}")
    path = folder / "w.srpo"
    path.write_text(WORKFLOW.format(objective=objective, advantage=advantage))
    return analyze(path.read_text(), str(path)).diagnostics


def test_validate_names_the_expected_signature_at_the_string(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "import torch  # never imported by validate\n\ndef loss(batch):\n    pass\n"
    )
    (error,) = diagnostics(tmp_path, '"bad.py:loss"')
    assert error.code == "E094" and (error.span.line, error.span.col) == (7, 25)
    assert "objective(batch: PolicyBatch, config: LossConfig) -> PolicyTerms" in error.message
    (error,) = diagnostics(
        plugin_folder(tmp_path), '"srpo_again.py:loss"', '"estimators.py:two_args_missing"'
    )
    column = (tmp_path / "w.srpo").read_text().splitlines()[6].index('"estimators.py') + 1
    assert error.code == "E094" and (error.span.line, error.span.col) == (7, column)
    assert "advantage(inputs: AdvantageInputs, eps: float) -> Tensor [N]" in error.message
    assert [d.code for d in diagnostics(tmp_path, '"missing.py:loss"')] == ["E091"]
    assert [d.code for d in diagnostics(plugin_folder(tmp_path), '"srpo_again.py:los"')] == ["E093"]
    assert diagnostics(plugin_folder(tmp_path), '"srpo_again.py:loss"', '"estimators.py:centred"') == []


def test_a_python_objective_names_its_aggregation(tmp_path: Path) -> None:
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    plugin_folder(tmp_path)
    text = WORKFLOW.format(objective='"srpo_again.py:loss"', advantage="event").replace(
        'aggregation = "event-mean", ', ""
    )
    (error,) = analyze(text, str(tmp_path / "w.srpo")).diagnostics
    assert error.code == "E024"
    assert (
        error.message == "train: `aggregation` is required with a Python objective "
        "(event-mean, token-mean, row-mean, episode-mean)"
    )


def test_validate_of_a_workflow_with_plugins_imports_no_torch() -> None:
    code = (
        "import sys; from srpo_dsl.cli.main import main\n"
        f"try:\n    main(['validate', {str(GSPO)!r}])\nexcept SystemExit as e: print(e.code)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'deepspeed') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip().splitlines()[-2:] == ["0", "[]"], r.stderr


def test_an_objective_named_on_the_command_line_is_checked_before_anything_loads(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "srpo_dsl", "train", str(GSPO), "--out", str(tmp_path / "run")]
    r = subprocess.run(
        [*args, "--option", "objective=plugins/gspo.py:los"], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 2 and not (tmp_path / "run").exists()
    assert r.stderr.strip().splitlines()[-1] == (
        "error: training option `objective` = 'plugins/gspo.py:los': error[E093]: "
        f"{GSPO.parent / 'plugins' / 'gspo.py'} defines no top-level function `los` (did you mean `loss`?)"
    )
