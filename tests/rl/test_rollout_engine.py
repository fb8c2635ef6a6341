"""The trainer drives its rollout engines through `RolloutEngine`: the order of sleep, update, weight
loading and waking per step, the weights pushed (gathered under ZeRO-3), policy versions, and
the LoRA weights a `vllm` engine receives (folded into the base model's names)."""

from __future__ import annotations

import copy
import json
from typing import ClassVar

import pytest
import torch

from srpo_dsl.backends.hf import HFBackend
from tests.support.training import TEAM, varied_reward, write_team

STEPS = 3
QUIET = {"steps": STEPS, "eval_every": 100, "save_every": 100, "eval_size": 1, "eval_k": 1, "epochs": 1}


class RecordingEngine(HFBackend):
    """The real hf engine, noting each protocol call in `LOG` (the trainer builds it by name)."""

    LOG: ClassVar[list[tuple]] = []

    def generate(self, requests, *, seed=None):
        self.LOG.append(("generate", id(self), self.version))
        return super().generate(requests, seed=seed)

    def sleep(self):
        self.LOG.append(("sleep", id(self)))
        super().sleep()
        self.LOG.append(("kept caches", id(self), len(getattr(self.decoder, "buffers", {}))))

    def wake_up(self, tags=None):
        self.LOG.append(("wake", id(self), tuple(tags or ())))
        super().wake_up(tags)

    def load_weights(self, weights=None):
        pairs = None if weights is None else [(n, t.detach().clone()) for n, t in weights]
        self.LOG.append(("load", id(self), None if pairs is None else dict(pairs)))
        return super().load_weights(pairs)


FROZEN_B = TEAM.replace('policy b = hf("model-b") with', 'policy b = hf("model-b") frozen with')


def train_recorded(
    models, tmp_path, monkeypatch, zero: int, team: str = TEAM, decode: str = "auto"
) -> tuple[dict, list[tuple]]:
    from srpo_dsl.rl.engines import policies
    from srpo_dsl.rl.loop import trainer
    from srpo_dsl.rl.loop.plan import plan_file

    monkeypatch.setattr(policies, "HFBackend", RecordingEngine)
    RecordingEngine.LOG = []
    built: dict = {}
    real_build = policies.build_policies

    def recording_build(*args):
        built.update(real_build(*args))
        return built

    monkeypatch.setattr(policies, "build_policies", recording_build)
    varied_reward()
    workflow = write_team(tmp_path / "wf", team)
    trainer.train(
        plan_file(
            workflow,
            tmp_path / "run",
            {**QUIET, "zero": zero},
            models={"a": str(models[0]), "b": str(models[1])},
            device="cpu",
            decode=decode,
        ),
        progress=False,
    )
    return built, RecordingEngine.LOG


def calls_of(log: list[tuple], engine_id: int) -> list[str]:
    """Each call on one engine as a word: generate, sleep, wake:TAGS, load (None: shared module)."""
    words = []
    for call in log:
        if call[1] != engine_id:
            continue
        if call[0] == "wake":
            words.append("wake:" + ",".join(call[2]))
        elif call[0] == "kept caches":
            continue
        elif call[0] == "load":
            words.append("load" if call[2] is not None else "load-shared")
        else:
            words.append(call[0])
    return [w for i, w in enumerate(words) if w != "generate" or i == 0 or words[i - 1] != "generate"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("zero", "team", "decode"), [(0, TEAM, "auto"), (3, TEAM, "static"), (0, FROZEN_B, "static")]
)
def test_each_step_sleeps_updates_loads_then_wakes(models, tmp_path, monkeypatch, dist, zero, team, decode):
    assert "frozen" in FROZEN_B
    built, log = train_recorded(models, tmp_path, monkeypatch, zero, team, decode)
    assert {p.backend.decoder.mode for p in built.values()} == {"dynamic" if decode == "auto" else decode}
    assert all(call[2] == 0 for call in log if call[0] == "kept caches")  # static: caches go before updates
    step = ["generate", "sleep", "wake:weights", "load" if zero == 3 else "load-shared", "wake:kv_cache"]
    for name, policy in built.items():
        words = calls_of(log, id(policy.backend))
        if policy.engine is None:  # frozen: never put to sleep (a vllm engine would lose its weights)
            assert words == ["generate"] and policy.backend.version == 0
            continue
        # per step (the first after step 0's evaluation): roll out, release, update, load, wake
        assert words == [*step * STEPS, "generate"], name  # the last: the final evaluation
        assert policy.backend.version == STEPS
        generated_at = [c[2] for c in log if c[0] == "generate" and c[1] == id(policy.backend)]
        assert generated_at[-1] == STEPS and generated_at[0] == 0  # each rollout records its policy version
    assert sum(p.engine is None for p in built.values()) == (team == FROZEN_B)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for row in metrics:
        parts = row["time/rollout"] + row["time/compile"] + row["time/update"] + row["time/sync"]
        assert 0 < parts <= row["time"] + 1e-6 and row["time"] - parts < 0.05
        assert row["time/compile"] == row["decode/shapes"] == 0  # `static` and `dynamic` compile nothing
        if team == TEAM:  # every engine trained: its static caches went before its update
            assert row["decode/cache_gib"] == 0


@pytest.mark.slow
def test_zero3_streams_the_gathered_weights_into_the_full_copy(models, tmp_path, monkeypatch, dist):
    from srpo_dsl.rl.engines.weight_sync import full_state

    built, log = train_recorded(models, tmp_path, monkeypatch, zero=3)
    for policy in built.values():
        loads = [c[2] for c in log if c[0] == "load" and c[1] == id(policy.backend)]
        assert len(loads) == STEPS
        with full_state(policy.module) as state:
            trained = {k: v.clone() for k, v in state.items()}
        assert loads[-1].keys() == dict(policy.module.named_parameters()).keys()
        for name, tensor in loads[-1].items():
            assert torch.equal(tensor, trained[name]), name  # full tensors, not ZeRO-3 shards
        copy_state = policy.backend.model.state_dict()
        assert all(torch.equal(copy_state[k], trained[k]) for k in trained)
        assert any(not torch.equal(loads[0][k], loads[-1][k]) for k in trained)  # each step's own weights


def test_rollout_engines_declare_the_pad_id_the_trainer_pads_with(models):
    """`pad_id` belongs to `RolloutEngine`: the hf engine's is the tokenizer's pad token, else its
    end-of-sequence token; a policy's rows pad with its engine's; without one, no rollout engine."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from srpo_dsl.backends.base import RolloutEngine
    from srpo_dsl.rl.engines.policies import TrainingPolicy

    model = AutoModelForCausalLM.from_pretrained(models[0])
    tokenizer = AutoTokenizer.from_pretrained(models[0])
    engine = HFBackend(model, tokenizer=tokenizer)
    assert isinstance(engine, RolloutEngine) and engine.pad_id == tokenizer.pad_token_id == 0
    assert TrainingPolicy("a", model, engine).pad_id == 0
    tokenizer.pad_token = None
    assert HFBackend(model, tokenizer=tokenizer).pad_id == tokenizer.eos_token_id == 2
    del engine.pad_id
    assert not isinstance(engine, RolloutEngine)


def test_merged_lora_weights_equal_peft_merge_and_leave_the_module_alone(models):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from srpo_dsl.rl.engines.weight_sync import rollout_weights

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(models[0])
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
    )
    model = get_peft_model(base, config)  # init_lora_weights=False: B is random, so each delta is nonzero
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = dict(rollout_weights(model, merged=True))
    expected = dict(copy.deepcopy(model).merge_and_unload().named_parameters())
    assert merged.keys() == expected.keys()  # the base model's own names, no lora_ tensors
    for name in expected:
        assert torch.allclose(merged[name], expected[name], atol=1e-6), name
    assert any(
        not torch.equal(merged[n], before[f"base_model.model.{n.replace('.weight', '.base_layer.weight')}"])
        for n in merged
        if "q_proj" in n
    )
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # never merged in place
    raw = dict(rollout_weights(model, merged=False))  # hf engine: the module's own names
    assert raw.keys() == dict(model.named_parameters()).keys()


def test_vllm_without_the_package_is_one_clear_error(monkeypatch):
    import importlib.util

    from srpo_dsl.rl.loop.plan import TrainError, check_backend

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(TrainError, match=r"needs the optional extra: pip install 'srpo-dsl\[vllm\]'"):
        check_backend("vllm", "cuda")
    with pytest.raises(TrainError, match="train rolls out with hf or vllm"):
        check_backend("scripted", "cpu")
    check_backend("hf", "cpu")
