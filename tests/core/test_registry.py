"""One mechanism for every registry: names without imports, built-ins by import path resolved at lookup,
plugins by decorator, and every reader (option schema, checker, parsers, task and tool kinds) taking
an entry a plugin registered."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from srpo_dsl import registries
from srpo_dsl.lang import analyze
from srpo_dsl.lang.checks.schema import TASK_KINDS, TOOL_KINDS, BindingKind, TrainOptions
from srpo_dsl.registries import CONTRACTS, Registry

ROOT = Path(__file__).resolve().parents[2]
HUB = [r for r in vars(registries).values() if isinstance(r, Registry)]


def diagnostics(folder: Path, text: str) -> list:
    (folder / "p.j2").write_text("{{ task.question }}")
    return analyze(text, str(folder / "w.srpo")).diagnostics


@pytest.fixture
def scratch(monkeypatch):
    """Registries restored after the test: what it registers does not leak into other tests."""

    def scratch(registry: Registry) -> Registry:
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        return registry

    return scratch


def test_names_are_read_without_importing_and_an_entry_is_imported_at_its_first_lookup(tmp_path, monkeypatch):
    (tmp_path / "lazy_entry.py").write_text("VALUE = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("thing", {"one": "lazy_entry:VALUE"})
    assert list(registry) == ["one"] and "one" in registry and len(registry) == 1
    assert "lazy_entry" not in sys.modules
    first = registry.lookup("one")
    assert "lazy_entry" in sys.modules and first is sys.modules["lazy_entry"].VALUE
    assert registry["one"] is first  # imported once
    del sys.modules["lazy_entry"]


def test_lookup_add_and_register() -> None:
    registry: Registry[int] = Registry("thing", {"a": "math:pi"})
    registry.add("b", 2)
    assert registry.register("c")(3) == 3
    assert dict(registry) == {"a": pytest.approx(3.14159, abs=1e-5), "b": 2, "c": 3}
    with pytest.raises(ValueError, match="thing 'b' is registered twice"):
        registry.add("b", 4)
    with pytest.raises(ValueError, match="unknown thing 'd'; known: a, b, c"):
        registry.lookup("d")
    registry["b"] = 5  # item assignment replaces on purpose (a test standing in for an entry)
    del registry["c"]
    assert list(registry) == ["a", "b"] and registry["b"] == 5


def test_every_builtin_entry_resolves() -> None:
    """A moved function breaks its import path here, not in a user's run."""
    for registry in HUB:
        assert all(registry[name] is not None for name in registry), registry.what
    assert all(callable(CONTRACTS[name].parser) for name in CONTRACTS)
    for kinds in (registries.BACKENDS, registries.ROLLOUT_ENGINES, registries.TRACKERS):  # factories by path
        assert all(callable(registries.load(kinds[name].factory)) for name in kinds), kinds.what
    assert all(callable(kinds[name].maker) for kinds in (TASK_KINDS, TOOL_KINDS) for name in kinds)
    assert {r.what for r in HUB} == {
        "objective",
        "aggregation",
        "advantage estimator",
        "set norm",
        "reward function",
        "backend",
        "rollout engine",
        "output contract",
        "tracker",
    }


def test_the_registries_import_nothing_heavy() -> None:
    code = (
        "import sys, srpo_dsl.registries, srpo_dsl.lang.checks.schema, srpo_dsl.lang.checks.checker\n"
        "print(sorted(m for m in ('torch', 'transformers', 'bm25s', 'sympy') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "[]", r.stderr


# --- a plugin's entries reach every reader -------------------------------------------------------


def test_train_options_and_the_checker_accept_a_registered_objective(scratch, tmp_path) -> None:
    from srpo_dsl.rl.objective.losses import get_objective, register_policy_loss, token_terms

    scratch(registries.OBJECTIVES)
    scratch(registries.SET_NORMS).add("cube_root", lambda k: k ** (-1 / 3))
    register_policy_loss("token_srpo", aggregation="token-mean", advantage="event")(token_terms)
    assert TrainOptions(objective="token_srpo", set_norm="cube_root").objective == "token_srpo"
    assert get_objective("token_srpo").advantage == "event"
    text = (
        'workflow w\npolicy lm = hf("m")\ntask arith()\nagent a uses lm prompt "p.j2" emits boxed\n'
        "aggregate a\nreward exact_match(a, task.answer)\ntrain with (objective = token_srpo, set_norm = cube_root)\n"
    )
    assert diagnostics(tmp_path, text) == []
    (error,) = diagnostics(tmp_path, text.replace("token_srpo", "token_srp"))
    assert error.code == "E024" and "'token_srpo'" in error.message


def test_a_registered_aggregation_serves_any_objective_with_terms_of_its_rank(scratch, tmp_path) -> None:
    import torch

    from srpo_dsl.rl.objective.aggregation import Aggregation, register_aggregation
    from srpo_dsl.rl.objective.plugins import training_objective

    scratch(registries.AGGREGATIONS)
    register_aggregation("token-sum-per-row", Aggregation("num_rows", 2))  # sum over tokens, mean over rows
    objective = training_objective(TrainOptions(objective="grpo", aggregation="token-sum-per-row"), tmp_path)
    lp = torch.tensor([[-1.0, -2.0], [-0.5, -9.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.tensor([1.0, -3.0], dtype=torch.float64)
    loss, metrics = objective(lp, lp.clone(), mask, torch.arange(2), adv)
    assert loss.item() == pytest.approx(
        -(1.0 + 1.0 - 3.0) / 2
    )  # on-policy, each token's term is A_i; / 2 rows
    assert (
        metrics["num_rows"] == 2 and metrics["num_units"] == 3
    )  # its count (rows), its terms' units (tokens)
    shared, _ = objective(lp, lp.clone(), mask, torch.arange(2), adv, num_rows=4)  # 4 rows over all ranks
    assert shared.item() == pytest.approx(-(1.0 + 1.0 - 3.0) / 4)
    with pytest.raises(ValueError, match="counts one of num_events, num_tokens, num_rows"):
        Aggregation("num_prompts", 1)


def test_a_registered_contract_is_checked_and_parsed(scratch, tmp_path) -> None:
    from srpo_dsl.registries import register_contract
    from srpo_dsl.runtime.parsers import Parsed, parse_output

    scratch(CONTRACTS)

    @register_contract("yes_no", args="words", describe="one of the words, alone")
    def parse_yes_no(text: str, words: tuple[str, ...]) -> Parsed:
        word = text.strip()
        return Parsed(True, word) if word in words else Parsed(False, None, f"not one of {words}")

    assert parse_output("yes_no", " yes ", args=("yes", "no")) == Parsed(True, "yes")
    assert not parse_output("yes_no", "maybe", args=("yes", "no")).valid
    with pytest.raises(ValueError, match="needs its allowed words"):
        parse_output("yes_no", "yes")
    text = (
        'workflow w\npolicy lm = hf("m")\ntask arith()\nagent a uses lm prompt "p.j2" emits {c}\n'
        "aggregate a\nreward exact_match(a, task.answer)\n"
    )
    assert diagnostics(tmp_path, text.format(c="yes_no(yes, no)")) == []
    (error,) = diagnostics(tmp_path, text.format(c="yes_no"))
    assert error.code == "E031"


def test_the_checker_reads_a_contracts_capabilities_not_its_name(scratch, tmp_path) -> None:
    """A plugin's contract that is always valid is `text` to the `retries` check (W006), a testable one is
    a verdict to conditions (E060), a multi-call one is `act` to `calls` (E074); without the capability,
    the same contract is none of them."""
    from srpo_dsl.registries import register_contract
    from srpo_dsl.runtime.parsers import Parsed

    scratch(CONTRACTS)
    for name, args, capability in (
        ("anything", "none", {"always_valid": True}),
        ("plain", "none", {}),
        ("yes_no", "words", {"testable": True}),
        ("either", "words", {}),
        ("steps", "actions", {"multi_call": True}),
        ("one_step", "actions", {}),
    ):
        register_contract(name, args=args, describe="a test's", **capability)(
            lambda text, *a: Parsed(True, text)
        )
    head = 'workflow w\npolicy lm = hf("m")\ntask arith()\nagent a uses lm prompt "p.j2" emits '
    reward = "reward exact_match(a, task.answer)\n"

    def found(contract: str, options: str, steps: str = "aggregate a\n") -> list[tuple[str, str]]:
        text = f"{head}{contract} with ({options})\n{steps}{reward}"
        return [(d.code, d.message) for d in diagnostics(tmp_path, text)]

    never = "`retries = 2` never resamples: `a` emits `{}`, which is always valid"
    assert found("text", "retries = 2") == [("W006", never.format("text"))]
    assert found("anything", "retries = 2") == [("W006", never.format("anything"))]
    assert found("plain", "retries = 2") == []
    loop = "repeat at most 2 { aggregate a } until a == yes\n"
    assert found("yes_no(yes, no)", "retries = 0", loop) == []
    assert [code for code, _ in found("either(yes, no)", "retries = 0", loop)] == ["E060"]
    assert found("steps(look, answer)", "calls = 2") == []
    assert [code for code, _ in found("one_step(look, answer)", "calls = 2")] == ["E074"]
    with pytest.raises(ValueError, match="testable contract lists its words"):
        register_contract("bad", args="none", describe="a test's", testable=True)(lambda text: None)


def test_registered_task_and_tool_kinds_load_through_the_runtime(scratch, tmp_path) -> None:
    from srpo_dsl.lang.checks.schema import _Options
    from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data

    class Countdown(_Options):
        source: str
        n: int = 3

    def countdown(options: dict, split: str, data: Path | None, limit: int | None) -> list[dict]:
        start = int(Path(options["source"]).read_text())
        return [
            {"id": f"{split}-{i}", "question": str(start - i), "answer": "0"} for i in range(options["n"])
        ]

    class Notes(_Options):
        corpus: str
        top_k: int = 1

    class NotesRetriever:
        def __init__(self, corpus: Path):
            self.corpus = corpus

    scratch(TASK_KINDS).add("countdown", BindingKind(Countdown, ("source",), ("source",), countdown))
    scratch(TOOL_KINDS).add("notes", BindingKind(Notes, ("corpus",), ("corpus",), NotesRetriever))
    (tmp_path / "start.txt").write_text("10")
    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "w.srpo").write_text(
        'workflow w\npolicy lm = hf("m")\ntask countdown("start.txt", n = 2)\ntool t = notes("start.txt")\n'
        'agent a uses lm prompt "p.j2" emits text\naggregate a\ncall t on a\n'
        "reward exact_match(a, task.answer)\n"
    )
    wf = load_workflow(tmp_path / "w.srpo")
    assert [t["question"] for t in task_data(wf, split="eval")] == ["10", "9"]
    assert build_tools(wf)["t"].corpus == tmp_path.resolve() / "start.txt"  # a path option, resolved
