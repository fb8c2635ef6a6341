"""Every public function and method of the Python API refuses a wrong-typed or out-of-range argument with
a `UsageError` naming it (`srpo_dsl.arguments.checked`), the CLI's ranges (`argranges.BOUNDS`) included;
the public callables are found from the package's exports, so a new one without the check fails here."""

from __future__ import annotations

import inspect
import math
from pathlib import Path, PurePosixPath

import pytest

import srpo_dsl
import srpo_dsl.api
import srpo_dsl.api.runs
import srpo_dsl.api.training
from srpo_dsl.api import Evaluation, Rollouts, RolloutSummary, Run, UsageError, Workflow
from srpo_dsl.argranges import BOUNDS
from srpo_dsl.runtime.traces import TraceEpisode

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = (srpo_dsl.api, srpo_dsl.api.runs, srpo_dsl.api.training)
NAN = float("nan")


def public_callables() -> dict[str, object]:
    """{`load`, `Workflow.run`, ...: the function}: every function, and every method srpo-dsl defines on a
    class, that the public modules export."""
    found: dict[str, object] = {}
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                found[name] = obj
            elif isinstance(obj, type) and not issubclass(obj, BaseException):
                for attr in dir(obj):
                    raw = inspect.getattr_static(obj, attr)
                    raw = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
                    if (
                        not attr.startswith("_")
                        and inspect.isfunction(raw)
                        and raw.__module__.startswith("srpo_dsl")
                    ):
                        found[f"{name}.{attr}"] = raw
    return found


@pytest.fixture(scope="module")
def objects() -> dict[str, object]:
    wf = srpo_dsl.load(ROOT / "workflows/quickstart.srpo")
    return {
        "wf": wf,
        "rollouts": Rollouts(wf, []),
        "evaluation": Evaluation(wf, 1, 0, [], 0.0, 0.0, (), []),
        "episode": TraceEpisode.model_construct(),
    }


# (the public callable, how to reach it from `objects`, the call's arguments, the argument the error names)
WRONG = [
    ("load", lambda o: srpo_dsl.load, {"path": None}, "path"),
    ("load", lambda o: srpo_dsl.load, {"path": 3}, "path"),
    ("load", lambda o: srpo_dsl.load, {"path": 2.5}, "path"),
    ("load", lambda o: srpo_dsl.load, {"path": "w.srpo", "settings": ["tool.a.b=1"]}, "settings"),
    ("load", lambda o: srpo_dsl.load, {"path": "w.srpo", "settings": {1: "x"}}, "settings"),
    ("Workflow.run", lambda o: o["wf"].run, {"limit": 2.5}, "limit"),
    ("Workflow.run", lambda o: o["wf"].run, {"limit": NAN}, "limit"),
    ("Workflow.run", lambda o: o["wf"].run, {"limit": True}, "limit"),
    ("Workflow.run", lambda o: o["wf"].run, {"limit": 0}, "limit"),
    ("Workflow.run", lambda o: o["wf"].run, {"samples": 0}, "samples"),
    ("Workflow.run", lambda o: o["wf"].run, {"samples": "2"}, "samples"),
    ("Workflow.run", lambda o: o["wf"].run, {"seed": 1.0}, "seed"),
    ("Workflow.run", lambda o: o["wf"].run, {"data": 5}, "data"),
    ("Workflow.run", lambda o: o["wf"].run, {"backend": None}, "backend"),
    ("Workflow.run", lambda o: o["wf"].run, {"models": {"lm": 3}}, "models"),
    ("Workflow.run", lambda o: o["wf"].run, {"models": 7}, "models"),
    ("Workflow.run", lambda o: o["wf"].run, {"device": 0}, "device"),
    ("Workflow.run", lambda o: o["wf"].run, {"progress": 1}, "progress"),
    ("Workflow.run", lambda o: o["wf"].run, {"verbose": "yes"}, "verbose"),
    ("Workflow.run", lambda o: o["wf"].run, {"nonsense": 1}, "nonsense"),
    ("Workflow.evaluate", lambda o: o["wf"].evaluate, {"k": 0}, "k"),
    ("Workflow.evaluate", lambda o: o["wf"].evaluate, {"k": 4.0}, "k"),
    ("Workflow.evaluate", lambda o: o["wf"].evaluate, {"data": [1, 2]}, "data"),
    ("Workflow.evaluate", lambda o: o["wf"].evaluate, {"limit": -1}, "limit"),
    ("Workflow.evaluate", lambda o: o["wf"].evaluate, {"decode": 3}, "decode"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": None}, "out"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "resume": "no"}, "resume"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "eval_data": "a.jsonl"}, "eval_data"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "ds_config": 1}, "ds_config"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "offload": None}, "offload"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "offload": "two"}, "offload"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "decode": "eager"}, "decode"),
    ("Workflow.run", lambda o: o["wf"].run, {"decode": "Auto"}, "decode"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "launcher": 1}, "launcher"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "ray_address": 6379}, "ray_address"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "ray_processes": 0}, "ray_processes"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "ray_cpus": 0}, "ray_cpus"),
    ("Workflow.plan", lambda o: o["wf"].plan, {"out": "r", "ray_cpus": 1.5}, "ray_cpus"),
    ("Workflow.train", lambda o: o["wf"].train, {"out": 3}, "out"),
    ("Workflow.train", lambda o: o["wf"].train, {"out": "r", "progress": None}, "progress"),
    ("Workflow.train", lambda o: o["wf"].train, {"out": "r", "verbose": 0}, "verbose"),
    ("Workflow.render_prompt", lambda o: o["wf"].render_prompt, {"role": 1}, "role"),
    ("Workflow.render_prompt", lambda o: o["wf"].render_prompt, {"role": "solver", "replica": 0}, "replica"),
    ("Workflow.render_prompt", lambda o: o["wf"].render_prompt, {"role": "solver", "data": 1.5}, "data"),
    ("Workflow.adapter_sizes", lambda o: o["wf"].adapter_sizes, {"base": None}, "base"),
    ("Workflow.resolve", lambda o: o["wf"].resolve, {"relative": 3}, "relative"),
    ("Workflow.renderer", lambda o: o["wf"].renderer, {"folders": []}, "folders"),
    ("Workflow.to_networkx", lambda o: o["wf"].to_networkx, {"layout": 1}, "layout"),
    ("Rollouts.save", lambda o: o["rollouts"].save, {"out": None}, "out"),
    ("Rollouts.save", lambda o: o["rollouts"].save, {"out": "r", "overwrite": "yes"}, "overwrite"),
    ("Evaluation.save", lambda o: o["evaluation"].save, {"out": 1.5}, "out"),
    ("Evaluation.save", lambda o: o["evaluation"].save, {"out": "r", "overwrite": 1}, "overwrite"),
    ("Evaluation.table", lambda o: o["evaluation"].table, {"style": "md"}, "style"),
    ("Evaluation.to_dict", lambda o: o["evaluation"].to_dict, {"indent": 2}, "indent"),
    ("RolloutSummary.of", lambda o: RolloutSummary.of, {"traces": "traces.jsonl"}, "traces"),
    ("RolloutSummary.of", lambda o: RolloutSummary.of, {"traces": [1]}, "traces"),
    ("Run.open", lambda o: Run.open, {"path": None}, "path"),
    ("Run.open", lambda o: Run.open, {"path": 3}, "path"),
    ("load_traces", lambda o: srpo_dsl.api.runs.load_traces, {"path": 1}, "path"),
    ("export_checkpoint", lambda o: srpo_dsl.api.runs.export_checkpoint, {"run": 1}, "run"),
    (
        "export_checkpoint",
        lambda o: srpo_dsl.api.runs.export_checkpoint,
        {"run": Path("r"), "step": -1},
        "step",
    ),
    (
        "export_checkpoint",
        lambda o: srpo_dsl.api.runs.export_checkpoint,
        {"run": Path("r"), "step": 1.5},
        "step",
    ),
    ("write_plots", lambda o: srpo_dsl.api.runs.write_plots, {"dynamics": {}}, "dynamics"),
    ("write_plots", lambda o: srpo_dsl.api.runs.write_plots, {"smoothing": NAN}, "smoothing"),
    ("write_plots", lambda o: srpo_dsl.api.runs.write_plots, {"smoothing": 1.5}, "smoothing"),
    ("write_plots", lambda o: srpo_dsl.api.runs.write_plots, {"smoothing": False}, "smoothing"),
    ("train_plan", lambda o: srpo_dsl.api.training.train_plan, {"plan": "runs/q"}, "plan"),
    ("TraceEpisode.return_of", lambda o: o["episode"].return_of, {"role": 1}, "role"),
    ("TraceEpisode.return_of", lambda o: o["episode"].return_of, {"role": "a", "replica": 0}, "replica"),
    ("TraceEpisode.return_of", lambda o: o["episode"].return_of, {"role": "a", "round": 1.0}, "round"),
    ("TraceEpisode.model_dump_line", lambda o: o["episode"].model_dump_line, {"indent": 2}, "indent"),
]


def test_every_public_callable_is_checked_and_in_the_table() -> None:
    public = public_callables()
    assert sorted(n for n, f in public.items() if not getattr(f, "__checked__", False)) == []
    assert sorted(set(public) - {row[0] for row in WRONG}) == []
    assert len(WRONG) >= 45


@pytest.mark.parametrize(
    ("name", "reach", "kwargs", "argument"), WRONG, ids=[f"{r[0]}-{r[3]}" for r in WRONG]
)
def test_a_wrong_argument_is_a_usage_error_naming_it(objects, name, reach, kwargs, argument) -> None:
    with pytest.raises(UsageError) as caught:
        reach(objects)(**kwargs)
    assert type(caught.value) is UsageError
    message = str(caught.value)
    assert argument in message and "\n" not in message
    assert message.startswith(f"{name.rsplit('.', 1)[-1]}(")


def test_the_message_form() -> None:
    with pytest.raises(UsageError, match=r"^load\(path=3\): path must be a str or os.PathLike, got int$"):
        srpo_dsl.load(3)
    with pytest.raises(UsageError, match=r"^run\(limit=nan\): limit must be an int or None, got float$"):
        Workflow.run(srpo_dsl.load(ROOT / "workflows/quickstart.srpo"), limit=math.nan)
    with pytest.raises(UsageError) as caught:  # a value of any type: `Any`, in the annotation's words
        srpo_dsl.load("w.srpo", settings=[1])
    assert (
        str(caught.value) == "load(settings=[1]): settings must be a mapping of str to Any or None, got list"
    )


def test_a_fixed_choice_names_its_values(tmp_path: Path) -> None:
    """`offload` and `decode` take the values the CLI offers (`srpo_dsl.choices`), nothing else."""
    from srpo_dsl.choices import DECODE_MODES, OFFLOAD

    wf = srpo_dsl.load(ROOT / "workflows/quickstart.srpo")
    said = r"^plan\(offload='two'\): offload must be one of none, optimizer, params, all, got 'two'$"
    with pytest.raises(UsageError, match=said):
        wf.plan(tmp_path / "out", offload="two")
    with pytest.raises(UsageError, match=r"^plan\(decode='eager'\): decode must be one of auto, dynamic, st"):
        wf.plan(tmp_path / "out", decode="eager")
    assert [wf.plan(tmp_path / o, offload=o, device="cpu").setup.offload for o in OFFLOAD] == list(OFFLOAD)
    assert wf.plan(tmp_path / "d", decode=DECODE_MODES[-1], device="cpu").setup.decode == "compiled"


def test_signatures_defaults_and_docstrings_are_kept() -> None:
    run = Workflow.run
    assert inspect.signature(run) == inspect.signature(run.__wrapped__)
    assert inspect.signature(run).parameters["samples"].default == 1
    assert run.__doc__ and run.__name__ == "run"
    assert srpo_dsl.load.__doc__.startswith("The workflow at `path`")


def test_right_calls_still_work(objects, tmp_path: Path) -> None:
    wf = srpo_dsl.load(str(ROOT / "workflows/quickstart.srpo"), settings={})
    assert srpo_dsl.load(PurePosixPath(ROOT / "workflows/quickstart.srpo")).graph.hash == wf.graph.hash
    assert wf.resolve("a.txt") == wf.folder / "a.txt"
    assert "solver" in wf.render_prompt("solver", replica=1) or wf.render_prompt("solver")
    assert objects["rollouts"].save(tmp_path / "r", overwrite=False) == tmp_path / "r"
    assert RolloutSummary.of(()).episodes == 0


def test_the_cli_reads_the_same_bounds() -> None:
    from srpo_dsl.cli.run_cmds import LIMIT
    from srpo_dsl.cli.train_cmds import RAY_CPUS, RAY_PROCESSES

    assert LIMIT.min == BOUNDS["limit"].low
    assert RAY_CPUS.min == RAY_PROCESSES.min == BOUNDS["ray_cpus"].low


@pytest.mark.parametrize(("name", "value"), [("steps", True), ("lr", False), ("group", True)])
def test_a_bool_for_a_numeric_training_option_is_refused(tmp_path: Path, name, value) -> None:
    """pydantic would read `steps=True` as 1 step: the option's type is named instead."""
    wf = srpo_dsl.load(ROOT / "workflows/quickstart.srpo")
    with pytest.raises(UsageError, match=rf"^training option `{name}` takes (int|float), not {value}$"):
        wf.plan(tmp_path / "out", **{name: value})
