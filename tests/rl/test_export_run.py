"""`srpo-dsl export`: each trained policy as a Hugging Face model, adapters alone and merged; errors as one
line that leave nothing written."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch

from srpo_dsl.cli.main import main
from srpo_dsl.models.specs import resolve_model_spec
from tests.support.clitools import cli

CODE = """
def length(answer, row):
    return float(len(answer or ""))
"""
WORKFLOW = """workflow exported
policy base = hf("{model}") frozen
policy a = adapter(base, r = 4, alpha = 8)
policy b = adapter(base, r = 2, alpha = 2, targets = "q_proj,v_proj")
policy full = hf("{model}")
policy own = hf("{model}") lora(r = 4, alpha = 16)
task arith(n = 8, eval_n = 2)
agent solver[2] uses a prompt "p.j2" emits text with (max_tokens = 4)
agent checker uses b prompt "p.j2" emits text with (max_tokens = 4)
agent writer uses own prompt "p.j2" emits text with (max_tokens = 4)
agent aggregator uses full prompt "p.j2" emits text with (max_tokens = 4)
parallel solver
parallel checker
parallel writer
aggregate aggregator
reward "user.py:length"(aggregator)
train with (group = 2, batch = 2, steps = 1, eval_size = 2, eval_k = 1, save_every = 1, lr = 5e-2)
"""
IDS = torch.tensor([[1, 7, 30, 42, 99, 5, 250, 12]])


def export(*args: object) -> int:
    """`srpo-dsl export ARGS` in this process; its exit code."""
    with pytest.raises(SystemExit) as exit_:
        main(["export", *map(str, args)])
    return exit_.value.code


def train_run(folder: Path, model: Path, **overrides: int) -> Path:
    """A one-step run of WORKFLOW (a high lr: every adapter and weight moves)."""
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import train

    folder.mkdir()
    (folder / "user.py").write_text(CODE)
    (folder / "p.j2").write_text("{{ task.question }}=")
    (folder / "w.srpo").write_text(WORKFLOW.format(model=model))
    train(plan_file(folder / "w.srpo", folder / "run", overrides, models={}, device="cpu"), progress=False)
    return folder / "run"


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_random_model) -> Path:
    return train_run(tmp_path_factory.mktemp("zero0") / "w", tiny_random_model)


def saved_module(run: Path, owner: str) -> dict[str, torch.Tensor]:
    """What the ZeRO-0 engine of `owner` saved: its module's state dict."""
    file = run / "checkpoints" / "step-1" / owner / "state" / "mp_rank_00_model_states.pt"
    return torch.load(file, map_location="cpu", weights_only=False)["module"]


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=IDS).logits


def causal_lm(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def with_adapter(model_path: Path, adapter: Path) -> torch.nn.Module:
    from peft import PeftModel

    return PeftModel.from_pretrained(causal_lm(model_path), adapter)


def adapter_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


@pytest.fixture(scope="module")
def exported(run: Path) -> Path:
    stale = run / "export" / "a" / "stale.txt"  # a re-export replaces a policy's folder whole
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier export")
    assert export(run) == 2 and stale.exists()  # only when asked to
    assert export(run, "--overwrite") == 0
    assert not stale.exists()
    return run / "export"


@pytest.mark.slow
def test_export_writes_each_trained_policy(exported: Path, capsys) -> None:
    assert sorted(p.name for p in exported.iterdir()) == ["a", "b", "full", "own"]  # not the frozen base
    for name in ("a", "b", "own"):
        assert {p.name for p in (exported / name).iterdir()} == {"adapter", "merged"}
        assert {"adapter_config.json", "adapter_model.safetensors"} <= {
            p.name for p in (exported / name / "adapter").iterdir()
        }
    assert [p.name for p in (exported / "full").iterdir()] == ["merged"]
    for name in ("a", "b", "full", "own"):
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
            p.name for p in (exported / name / "merged").iterdir()
        }
    mask = os.umask(0o022)
    os.umask(mask)
    modes = {stat.S_IMODE(p.stat().st_mode) for p in exported.rglob("*") if p.is_file()}
    assert modes == {0o666 & ~mask}  # safetensors writes 0600: the umask's modes, as every file written


@pytest.mark.slow
def test_each_adapter_is_saved_alone_with_its_options_and_trained_values(run: Path, exported: Path) -> None:
    saved = {"a": saved_module(run, "base"), "own": saved_module(run, "own")}
    saved["b"] = saved["a"]
    names = {"a": "adapter_a", "b": "adapter_b", "own": "default"}
    linear = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]  # all-linear
    options = {"a": (4, 8, linear), "b": (2, 2, ["q_proj", "v_proj"]), "own": (4, 16, linear)}
    for policy, name in names.items():
        folder = exported / policy / "adapter"
        config = json.loads((folder / "adapter_config.json").read_text())
        targets = sorted(t.rsplit(".", 1)[-1] for t in config["target_modules"])
        assert (config["r"], config["lora_alpha"], targets) == options[policy]
        expected = {k.replace(f".{name}.", "."): v for k, v in saved[policy].items() if f".{name}." in k}
        weights = adapter_weights(folder)
        assert weights.keys() == expected.keys() and len(weights) > 0
        for key, value in weights.items():
            torch.testing.assert_close(value, expected[key], rtol=0, atol=0)
        assert any(v.abs().max() > 0 for k, v in weights.items() if "lora_B" in k)  # trained: B moved off 0


@pytest.mark.slow
def test_merged_models_compute_what_base_plus_adapter_computes(exported: Path, tiny_random_model) -> None:
    base = logits(causal_lm(tiny_random_model))
    merged = {}
    for policy in ("a", "b", "own"):
        merged[policy] = logits(causal_lm(exported / policy / "merged"))
        reference = logits(with_adapter(tiny_random_model, exported / policy / "adapter"))
        torch.testing.assert_close(merged[policy], reference, rtol=0, atol=1e-5)
        assert (merged[policy] - base).abs().max() > 1e-3
    assert (merged["a"] - merged["b"]).abs().max() > 1e-3


@pytest.mark.slow
def test_a_fully_fine_tuned_policy_exports_its_trained_weights(run: Path, exported: Path, tiny_random_model):
    from transformers import AutoTokenizer

    saved = saved_module(run, "full")
    state = causal_lm(exported / "full" / "merged").state_dict()
    assert state.keys() == saved.keys()
    for key, value in state.items():
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0)
    tokenizer, original = (
        AutoTokenizer.from_pretrained(p) for p in (exported / "full" / "merged", tiny_random_model)
    )
    assert tokenizer("hello world").input_ids == original("hello world").input_ids


@pytest.mark.slow
def test_zero3_exports_what_zero0_exports(run: Path, exported: Path, tmp_path, tiny_random_model) -> None:
    """The same seeded run at ZeRO-3, where DeepSpeed gathers the fp32 weights from partitions.

    `full` and `own` start alike in both runs; the adapters of `base` do not (at ZeRO-3 the trainer
    builds `own`'s rollout copy first, which draws LoRA inits), so they are checked for consistency.
    """
    run3 = train_run(tmp_path / "w", tiny_random_model, zero=3)
    out = tmp_path / "out"
    assert export(run3, "--out", out) == 0
    for key, value in adapter_weights(out / "own" / "adapter").items():
        torch.testing.assert_close(value, adapter_weights(exported / "own" / "adapter")[key])
    full3 = causal_lm(out / "full" / "merged").state_dict()
    for key, value in causal_lm(exported / "full" / "merged").state_dict().items():
        torch.testing.assert_close(
            full3[key], value, rtol=1e-5, atol=1e-4
        )  # lr 5e-2: Adam amplifies fp noise
    for policy in ("a", "b"):
        assert (
            adapter_weights(out / policy / "adapter").keys()
            == adapter_weights(exported / policy / "adapter").keys()
        )
        reference = logits(with_adapter(tiny_random_model, out / policy / "adapter"))
        torch.testing.assert_close(logits(causal_lm(out / policy / "merged")), reference, rtol=0, atol=1e-5)


# --- errors: one line, a non-zero exit, nothing written ------------------------------------------------


def assert_error(capsys, code: int, *parts: str) -> None:
    """The last line on stderr (in this process transformers, imported earlier, may show progress bars)."""
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith("error: ") and all(part in err for part in parts), err


def test_a_missing_run_or_checkpoint_is_one_line(tmp_path, capsys) -> None:
    assert_error(capsys, export(tmp_path / "nope"), "no such folder")
    assert_error(capsys, export(tmp_path), "is not a training run")
    (tmp_path / "config.json").write_text("{}")
    assert_error(capsys, export(tmp_path), "holds no checkpoint yet")
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no export folder


def copy_run(run: Path, folder: Path) -> Path:
    return Path(shutil.copytree(run, folder / "run", ignore=shutil.ignore_patterns("export")))


def edit_config(run: Path, edit) -> None:
    path = run / "checkpoints" / "step-1" / "state.json"
    state = json.loads(path.read_text())
    edit(state["config"])
    path.write_text(json.dumps(state))


def nothing_written(folder: Path) -> bool:
    return not folder.exists() and not list(folder.parent.glob(f".{folder.name}*"))


@pytest.mark.slow
def test_a_step_that_does_not_exist_is_one_line(run: Path, tmp_path, capsys) -> None:
    code = export(run, "--step", 7, "--out", tmp_path / "out")
    assert_error(capsys, code, "has no checkpoint of step 7", "the latest is step-1")
    assert nothing_written(tmp_path / "out")


@pytest.mark.slow
def test_a_checkpoint_that_does_not_match_its_config_writes_nothing(run: Path, tmp_path, capsys) -> None:
    copy = copy_run(run, tmp_path)
    edit_config(copy, lambda c: c["adapters"]["b"].update(r=3))  # the saved adapter has r = 2
    r = cli("export", copy)  # as a user sees it: one line on stderr, nothing on stdout
    assert (r.returncode, r.stdout, r.stderr.count("\n")) == (2, "", 1), r.stderr
    assert r.stderr.startswith(f"error: {copy / 'checkpoints' / 'step-1' / 'base'} does not match the run's")
    assert "size mismatch for base_model.model.model.layers.0.self_attn.q_proj.lora_A.adapter_b" in r.stderr
    assert nothing_written(copy / "export")
    edit_config(copy, lambda c: c["adapters"]["b"].update(r=2, base="full"))
    assert_error(capsys, export(copy), "does not match the run's config", "keys differ")
    assert nothing_written(copy / "export")
    tiny = resolve_model_spec("builtin:tiny")  # another size: `full` fails after `base` was written
    edit_config(copy, lambda c: (c["adapters"]["b"].update(base="base"), c["models"].update(full=tiny)))
    assert_error(capsys, export(copy), "step-1/full does not match", "size mismatch for model.embed_tokens")
    assert nothing_written(copy / "export")
    shutil.rmtree(copy / "checkpoints" / "step-1" / "base")
    assert_error(capsys, export(copy), "holds no state for `base`")
    assert nothing_written(copy / "export")


@pytest.mark.slow
def test_a_policy_with_its_own_lora_reads_its_options_from_the_run(run: Path, tmp_path, capsys) -> None:
    copy = copy_run(run, tmp_path)
    edit_config(copy, lambda c: c.update(workflow=str(tmp_path / "gone.srpo")))  # the workflow is not read
    assert export(copy) == 0
    edit_config(copy, lambda c: c.update(lora=None))
    assert_error(capsys, export(copy, "--out", tmp_path / "e2"), "`own` has LoRA weights", "records no lora")
    assert nothing_written(tmp_path / "e2")
