"""Experiment files of `srpo-dsl sweep`: expansion into cells, and every error positioned in the file."""

import json
from pathlib import Path

import pytest

from srpo_dsl.sweep.experiment import OVERRIDES, ExperimentError, load_experiment, workflow_errors
from srpo_dsl.sweep.positions import locate
from srpo_dsl.sweep.runner import Job, train_command
from srpo_dsl.sweep.state import finished, open_state, run_dir
from tests.support.clitools import ROOT, cli

SHARED_MATH = ROOT.parent / "shared" / "data" / "math"

WORKFLOWS = ROOT / "workflows"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ExperimentError) as info:
        load_experiment(write(tmp_path, text))
    assert len(info.value.lines) == 1
    return info.value.lines[0]


HEAD = f"""seeds = [1, 2]
baseline = "sqrt"
[eval]
k = 2
[train]
steps = 3
[[cell]]
name = "sqrt"
workflow = "{WORKFLOWS / "toy_k4.srpo"}"
"""


def test_cells_and_grid_expand_with_defaults_and_names(tmp_path):
    text = (
        HEAD
        + f"""set_norm = "sqrt"
[[grid]]
workflow = "{WORKFLOWS / "toy_k1.srpo"}"
objective = ["grpo", "drmas"]
lr = [0.001, 0.0001]
clip = 0.1
"""
    )
    exp = load_experiment(write(tmp_path, text))
    assert [c.name for c in exp.cells] == [
        "sqrt",
        "toy_k1-objective=grpo-lr=0.001",
        "toy_k1-objective=grpo-lr=0.0001",
        "toy_k1-objective=drmas-lr=0.001",
        "toy_k1-objective=drmas-lr=0.0001",
    ]
    assert exp.cells[0].overrides == {"steps": 3, "set_norm": "sqrt"}
    assert exp.cells[4].overrides == {"steps": 3, "clip": 0.1, "objective": "drmas", "lr": 0.0001}
    assert exp.seeds == [1, 2] and exp.baseline == "sqrt" and exp.evaluation == {"eval_k": 2}
    cmd = train_command(exp, Job(exp.cells[4], 2), tmp_path / "out")
    run = run_dir(tmp_path / "out", exp.cells[4].name, 2)
    options = ["steps=3", "clip=0.1", "objective=drmas", "lr=0.0001", "eval_k=2"]
    head = ["train", str(WORKFLOWS / "toy_k1.srpo"), "--out", str(run), "--resume", "--seed", "2"]
    assert cmd[3:] == head + [x for o in options for x in ("--option", o)]


def test_unknown_override_is_positioned_with_a_hint(tmp_path):
    line = error_of(tmp_path, HEAD + "  clipp = 0.1\n")
    assert (
        line
        == f"{tmp_path / 'exp.toml'}:10:3: error: unknown override `clipp` (did you mean `clip`?); see TrainOptions"
    )


def test_bad_value_in_a_grid_list_points_at_its_key(tmp_path):
    text = HEAD + f'[[grid]]\nworkflow = "{WORKFLOWS / "toy_k4.srpo"}"\nset_norm = ["sqrt", "cube"]\n'
    line = error_of(tmp_path, text)
    assert line.startswith(
        f"{tmp_path / 'exp.toml'}:12:1: error: override `set_norm` = 'cube': Input should be"
    )


def test_second_grid_is_found_by_its_index(tmp_path):
    grid = f'[[grid]]\nworkflow = "{WORKFLOWS / "toy_k4.srpo"}"\nlr = [0.1]\n'
    line = error_of(tmp_path, HEAD + grid + grid.replace("lr = [0.1]", "lr = [-1.0]"))
    assert ":15:1: error: override `lr` = -1.0: Input should be greater than 0" in line


@pytest.mark.parametrize(
    ("extra", "where", "message"),
    [
        ("seed = 3\n", ":10:1:", "`seed` is set by the experiment's seeds"),
        ("[[cell]]\nname = 'sqrt'\nworkflow = 'x.srpo'\n", ":12:1:", "cannot read"),
        (
            f"[[cell]]\nname = 'sqrt'\nworkflow = '{WORKFLOWS / 'toy_k1.srpo'}'\n",
            ":11:1:",
            "two cells are named `sqrt`",
        ),
        ("[extra]\n", ":10:1:", "`extra`: Extra inputs are not permitted"),
    ],
)
def test_cell_errors(tmp_path, extra, where, message):
    line = error_of(tmp_path, HEAD + extra)
    assert where in line and message in line, line


def test_baseline_must_name_a_cell_and_seeds_must_differ(tmp_path):
    assert ":2:1: error: baseline `sqrtt` is no cell (did you mean `sqrt`?)" in error_of(
        tmp_path, HEAD.replace('baseline = "sqrt"', 'baseline = "sqrtt"')
    )
    assert ":1:1: error: the seeds repeat" in error_of(tmp_path, HEAD.replace("[1, 2]", "[1, 1]"))
    assert ":4:1: error: `eval.k`: Input should be greater than or equal to 1" in error_of(
        tmp_path, HEAD.replace("k = 2", "k = 0")
    )


def test_syntax_error_has_tomllibs_position(tmp_path):
    line = error_of(tmp_path, HEAD + "lr = = 1\n")
    assert line.startswith(f"{tmp_path / 'exp.toml'}:10:6: error: Invalid value"), line
    line = error_of(tmp_path, "seeds = [1, 2\n\n")  # tomllib: "at end of document"
    assert line == f"{tmp_path / 'exp.toml'}:2:1: error: Unclosed array", line


def test_locate_scans_tables_and_keys():
    text = 'a = 1\n[eval]\n  k = 2\n[[cell]]\nname = "x"\n[[cell]]\n"name" = "y"\nlr = 3\n'
    assert locate(text, ("a",)) == (1, 1)
    assert locate(text, ("eval", "k")) == (3, 3)
    assert locate(text, ("cell", 1, "name")) == (7, 1)
    assert locate(text, ("cell", 1, "lr", 0)) == (8, 1)
    assert locate(text, ("cell", 1, "clip")) == (6, 1)  # not written: the table's header
    assert locate(text, ("cell", 5, "lr")) == (1, 1)
    assert locate(text, ("eval",)) == (2, 1)


def test_overrides_come_from_train_options():
    from srpo_dsl.lang.checks.schema import TrainOptions

    assert set(OVERRIDES) == set(TrainOptions.model_fields) - {"seed", "eval_k", "eval_size", "eval_every"}


def test_a_changed_cell_refuses_the_old_folder(tmp_path):
    exp = load_experiment(write(tmp_path, HEAD))
    out = tmp_path / "out"
    out.mkdir()
    open_state(out, exp).save(out)
    changed = load_experiment(write(tmp_path, HEAD.replace("steps = 3", "steps = 4")))
    with pytest.raises(ExperimentError, match="cell `sqrt` had other settings"):
        open_state(out, changed)


def test_broken_workflow_stops_the_sweep_before_any_run(tmp_path):
    broken = tmp_path / "broken.srpo"
    broken.write_text(
        (WORKFLOWS / "toy_k4.srpo").read_text().replace("parallel solver ", "parallel solvers ")
    )
    (tmp_path / "quickstart").symlink_to(WORKFLOWS / "quickstart")
    exp_path = write(tmp_path, HEAD.replace(str(WORKFLOWS / "toy_k4.srpo"), str(broken)))
    assert any("undefined agent `solvers`" in e for e in workflow_errors(load_experiment(exp_path)))
    result = cli("sweep", exp_path, "--out", tmp_path / "out")
    assert result.returncode == 1
    assert f"{broken}:13:10: error[E012]: undefined agent `solvers`" in result.stderr
    assert "13 | parallel solvers" in result.stderr  # the source line, as `validate` shows it
    assert result.stderr.endswith("error: 1 error(s) in the experiment's workflows: no run started\n")
    assert not (tmp_path / "out").exists()


def test_sweep_usage_errors(tmp_path):
    result = cli("sweep", "--report", tmp_path)
    assert result.returncode == 1 and f"cannot report {tmp_path}: {tmp_path}: no sweep here" in result.stderr
    path = write(tmp_path, HEAD + "clipp = 1\n")
    result = cli("sweep", path, "--out", tmp_path / "o")
    assert result.returncode == 1 and result.stderr.count("\n") == 1  # one line, no traceback
    assert result.stderr.startswith(f"{path}:") and ": error: unknown override `clipp`" in result.stderr
    assert not (tmp_path / "o").exists()
    assert cli("sweep", write(tmp_path, HEAD)).returncode == 2


def test_shipped_toy_ablation_is_the_papers_cells_on_five_seeds():
    exp = load_experiment(ROOT / "experiments" / "toy_ablation.toml")
    cells = {c.name: c for c in exp.cells}
    assert list(cells) == ["singleton", "sum", "mean", "sqrt", "grpo", "drmas"]
    assert exp.seeds == [1, 2, 3, 4, 5] and exp.baseline == "sqrt"
    assert cells["singleton"].workflow.name == "toy_k1.srpo"
    assert {c.workflow.name for n, c in cells.items() if n != "singleton"} == {"toy_k4.srpo"}
    assert [cells[n].overrides.get("set_norm") for n in ("sum", "mean", "sqrt")] == ["none", "mean", "sqrt"]
    assert [cells[n].overrides.get("objective") for n in ("grpo", "drmas")] == ["grpo", "drmas"]
    assert workflow_errors(exp) == []


@pytest.mark.parametrize(
    ("recipe", "cells"),
    [
        (
            "paper_math.toml",
            {
                "single-grpo": ("math_single.srpo", "grpo"),
                "sharing-grpo": ("math_routed.srpo", "grpo"),
                "sharing-drmas": ("math_routed.srpo", "drmas"),
                "nonsharing-grpo": ("math_routed_nonsharing.srpo", "grpo"),
                "nonsharing-drmas": ("math_routed_nonsharing.srpo", "drmas"),
                "srpo": ("math_routed.srpo", "srpo"),
            },
        ),
        (
            "paper_search.toml",
            {
                "singleton": ("search_singleton.srpo", None),
                "sum": ("search_k5_sum.srpo", None),
                "mean": ("search_k5_mean.srpo", None),
                "sqrt": ("search_k5_sqrt.srpo", None),
                "routed": ("search_routed.srpo", None),
            },
        ),
    ],
)
def test_the_paper_recipes_hold_every_column_and_their_workflows_check_clean(recipe, cells):
    """The paper's Math columns and Search rows, each a cell of one paired experiment whose workflows
    validate; the non-sharing team has one model per role, the sharing team one for all."""
    from srpo_dsl.lang import analyze

    exp = load_experiment(Path(__file__).resolve().parents[2] / "experiments" / recipe)
    assert workflow_errors(exp) == []
    got = {c.name: (c.workflow.name, c.overrides.get("objective")) for c in exp.cells}
    assert got == cells
    if recipe == "paper_math.toml":
        policies = {
            c.name: len(analyze(c.workflow.read_text(), str(c.workflow)).program.policies) for c in exp.cells
        }
        assert policies["nonsharing-grpo"] == 4 and policies["sharing-grpo"] == policies["single-grpo"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["paper_math.toml"])
def test_every_cell_of_the_paper_recipes_runs_to_the_end_on_the_embedded_model(tmp_path, recipe):
    """`sweep --model builtin:tiny --seeds 1 --option steps=1 ...`: every cell trains and is evaluated, so
    the GPU recipes cannot rot; the command line's changes reach every run. The Math recipe only (its six
    cells: three workflows, three objectives): the Search recipe's cells are checked by the test above,
    and its workflows' rollouts by tests/runtime/test_executor.py (CI's 20 minutes)."""
    import json

    out = tmp_path / "sweep"
    options = ["--option", "steps=1", "--option", "batch=1", "--option", "group=2"]
    options += ["--option", "eval_k=1", "--option", "eval_size=1"]
    held_out = [SHARED_MATH / "aime2024.jsonl"]
    if (
        recipe == "paper_math.toml" and SHARED_MATH.is_dir()
    ):  # one of the six benchmarks, as a user gives it (a run given several: test_sweep_run.py)
        options += [x for p in held_out for x in ("--eval-data", str(p))]
    done = cli(
        "sweep",
        f"experiments/{recipe}",
        "--out",
        out,
        "--model",
        "builtin:tiny",
        "--seeds",
        "1",
        "--jobs",
        "1",  # one run at a time: CI's other worker runs timed multi-process tests on the 2 cores
        *options,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads((out / "sweep.json").read_text())
    assert {r["status"] for r in state["runs"].values()} == {"done"} and state["seeds"] == [1]
    assert state["evaluation"]["eval_k"] == 1 and state["evaluation"]["eval_size"] == 1
    assert all(c["model"] == "builtin:tiny" and c["overrides"]["steps"] == "1" for c in state["cells"])
    rows = (out / "results.md").read_text()
    assert all(f"| {c['name']} |" in rows for c in state["cells"])
    if "--eval-data" in options:  # every run evaluated on that file, in place of the recipe's
        assert state["datasets"] == [str(p) for p in held_out]
        last = json.loads((out / "cells" / "srpo" / "seed-1" / "eval.jsonl").read_text().splitlines()[-1])
        assert set(last["datasets"]) == {"aime2024"}, last


def test_a_sweep_refuses_an_option_it_owns_and_bad_seeds(tmp_path):
    for args, message in (
        (["--option", "seed=2"], "--option seed: not an option a sweep may set (use --seeds)"),
        (["--option", "stepz=2"], "no training option `stepz` (did you mean `steps`?)"),
        (["--option", "eval_k=x"], "--option eval_k=x: expected a whole number >= 1"),
        (["--seeds", "1,x"], "--seeds 1,x: expected integers"),
        (["--seeds", "1,1"], "a seed is given twice"),
        (["--eval-data", "aime25.jsonl"], "--eval-data aime25.jsonl: no such file"),
    ):
        done = cli("sweep", "experiments/paper_search.toml", "--out", tmp_path / "s", *args)
        assert done.returncode != 0 and message in done.stderr, done.stderr
        assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "config", [{"options": [1]}, {"options": {"steps": 1}}, {"workflow": "w.srpo"}, None]
)
def test_a_run_folder_whose_config_has_no_steps_is_not_finished(tmp_path: Path, config: object) -> None:
    """Only a run whose config.json names its steps, with that step's metrics row and checkpoint, is done;
    any other config.json (options not an object: once a TypeError out of `sweep`) is a run to start."""
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    assert not finished(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    (tmp_path / "checkpoints" / "step-1").mkdir(parents=True)
    assert finished(tmp_path) == (config == {"options": {"steps": 1}})
