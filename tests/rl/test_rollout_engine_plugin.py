"""Rollout engines and backends are treated as their registry entries declare, never by name: an engine
added outside the package through the documented path (docs/dsl.md, "Adding a rollout engine") trains,
and a kind copying another's capabilities under a new name gets that kind's treatment."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path

import pytest
import torch

import srpo_dsl
from srpo_dsl.backends.base import BackendError
from srpo_dsl.registries import BACKENDS, ROLLOUT_ENGINES, RolloutEngineKind, rollout_engine_problem

ROOT = Path(__file__).resolve().parents[2]

TOY_ENGINE = '''
"""A rollout engine of one's own: the hf engine, counting the generate calls it serves."""

from srpo_dsl.backends.hf import HFBackend
from srpo_dsl.registries import ROLLOUT_ENGINES, RolloutEngineKind


class CountingEngine(HFBackend):
    calls = 0

    def generate(self, requests, *, seed=None):
        CountingEngine.calls += 1
        return super().generate(requests, seed=seed)


def toy_engine(module, tokenizer, path, dist, decode):
    """Generates with the trainer's module, as `hf` does (`generates_with_module`, the default)."""
    return CountingEngine(module, tokenizer=tokenizer, decode=decode)


ROLLOUT_ENGINES.add("toy", RolloutEngineKind(toy_engine, serves_adapters=True))
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The module `toy_engine`, written outside the package and imported; its entry removed afterwards."""
    (tmp_path / "toy_engine.py").write_text(TOY_ENGINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("toy_engine")
    del ROLLOUT_ENGINES["toy"], sys.modules["toy_engine"]


@pytest.mark.slow
def test_an_engine_registered_outside_the_package_trains_the_quickstart(toy, tmp_path):
    wf = srpo_dsl.load(ROOT / "workflows" / "quickstart.srpo")
    run = wf.train(
        tmp_path / "run",
        backend="toy",
        steps=2,
        batch=2,
        group=2,
        eval_size=2,
        eval_k=1,
        save_every=100,
        device="cpu",
        progress=False,
    )
    assert toy.CountingEngine.calls > 0  # the toy engine generated the rollouts
    assert [row["step"] for row in run.history] == [1, 2]


@pytest.fixture
def colocated(monkeypatch):
    """`colocated`: vllm's capabilities under another name, with a factory that cannot be imported (so
    nothing here builds it, and vllm is never imported)."""
    kind = dataclasses.replace(ROLLOUT_ENGINES["vllm"], factory="no_such_module:engine")
    monkeypatch.setattr(ROLLOUT_ENGINES, "_entries", {**ROLLOUT_ENGINES._entries, "colocated": kind})
    yield kind
    assert "vllm" not in sys.modules


def test_the_checks_before_loading_read_the_capabilities(colocated, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a))
    assert rollout_engine_problem("colocated", "cpu") == (
        "--backend colocated needs a CUDA GPU (use --backend hf on CPU)"
    )
    assert rollout_engine_problem("colocated", "cuda") == (
        "--backend colocated needs the optional extra: pip install 'srpo-dsl[vllm]'"
    )
    assert rollout_engine_problem("hf", "cpu") is None
    assert (
        rollout_engine_problem("nope", "cpu")
        == "--backend nope: train rolls out with hf or vllm or colocated"
    )


TEAM = """workflow fit
policy solver = hf("model-a")
policy judge = hf("model-a") frozen
policy base = hf("model-a") frozen
policy one = adapter(base, r = 4, alpha = 8)
task arith(n = 8)
agent s uses solver prompt "p.j2" emits text
agent j uses judge prompt "p.j2" emits text
agent o uses one prompt "p.j2" emits text
parallel s
aggregate j
aggregate o
reward f1(o, task.answer)
"""


@pytest.fixture
def team(tmp_path):
    from srpo_dsl.runtime.setup import load_workflow

    (tmp_path / "p.j2").write_text("{{ task.question }}")
    (tmp_path / "team.srpo").write_text(TEAM)
    return load_workflow(tmp_path / "team.srpo").graph


def test_adapters_are_refused_by_what_an_engine_serves(colocated, team):
    from srpo_dsl.rl.engines.policies import Rollout, adapter_hosts

    assert adapter_hosts(team, Rollout("hf")) == ["base"]
    with pytest.raises(ValueError, match="serves adapters with the trainer's module"):
        RolloutEngineKind("toy:engine", generates_with_module=False, serves_adapters=True)
    with pytest.raises(
        BackendError, match=r"^--backend colocated: adapter\(\.\.\.\) policies generate with the hf"
    ):
        adapter_hosts(team, Rollout("colocated"))


def test_the_fit_check_counts_what_an_engine_declares(colocated, team, monkeypatch):
    """Frozen policies and ZeRO-3's full copy count for an engine generating with the trainer's module;
    a GPU share it reserves is left out of the memory for training."""
    from srpo_dsl.rl.engines import fit

    monkeypatch.setattr(fit, "parameter_count", lambda path: 10**9)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (0, 5 * 2**30))
    paths = dict.fromkeys(team.policies, "model-a")
    needed = {
        name: fit.needed_bytes(team, paths, fit.MemoryLayout(3, 4, "none", ROLLOUT_ENGINES[name]))
        for name in ("hf", "vllm", "colocated")
    }
    assert needed["colocated"] == needed["vllm"] != needed["hf"]
    assert needed["colocated"]["judge"] == 0 and needed["hf"]["judge"] == 2 * 10**9
    for name, left in (("hf", "5.0"), ("colocated", "3.5")):  # SRPO_DSL_VLLM_MEMORY: 0.3 by default
        monkeypatch.delenv("SRPO_DSL_VLLM_MEMORY", raising=False)
        problem = fit.check_fit(
            team, paths, fit.MemoryLayout(3, 4, "none", ROLLOUT_ENGINES[name]), torch.device("cuda")
        )
        assert f"more than the {left} GiB of the GPU left for training" in problem


def test_a_backend_that_replays_a_script_is_known_by_its_capability(monkeypatch, tmp_path):
    """`replay`: the scripted backend's entry under another name gets the scripted backend's treatment."""
    monkeypatch.setattr(BACKENDS, "_entries", {**BACKENDS._entries, "replay": BACKENDS["scripted"]})
    wf = srpo_dsl.load(ROOT / "workflows" / "math_fixed.srpo")
    with pytest.raises(srpo_dsl.UsageError, match=r"^the replay backend needs its reply script: models="):
        wf.run(backend="replay", limit=1, progress=False)
    replies = ROOT / "workflows" / "math_replies.json"
    assert (
        wf.run(backend="replay", models=replies, limit=2, progress=False).episodes
        == wf.run(backend="scripted", models=replies, limit=2, progress=False).episodes
    )


def test_a_rollout_worker_builds_every_engine_with_the_registered_one(toy, team, tmp_path):
    """Adapters on a shared base included: one engine of the kind that serves them, for the base and each
    adapter (the trainer's `build_adapter_group` builds it the same way)."""
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.distributed.process_group import Dist
    from srpo_dsl.rl.engines.policies import Rollout
    from srpo_dsl.rl.transport.worker import worker_engines
    from tests.support.training import make_models

    paths = dict.fromkeys(team.policies, str(make_models(tmp_path / "models")[0]))
    dist = Dist(0, 0, 1, torch.device("cpu"))
    engines = worker_engines(team, paths, TrainOptions(), dist, Rollout("toy"))
    assert all(isinstance(engine, toy.CountingEngine) for engine in engines.values())
    assert engines["one"] is engines["base"] and engines["solver"] is not engines["judge"]
