"""Export a training checkpoint as Hugging Face models, one folder per trained policy.

For each trained policy, into the folder the caller gives it:
- an adapter policy (`adapter(BASE, ...)`) or a policy with its own `lora(...)`: `adapter/` (peft's
  `save_pretrained` of that adapter alone) and `merged/` (that adapter merged into its base's weights);
- a fully fine-tuned policy: `merged/` (its trained weights).
Every `merged/` is a standalone checkpoint with its base's tokenizer; all weights are fp32.

What to rebuild comes from the run itself: the checkpoint's run config (`models`, `adapters`,
`lora`, the ZeRO stage of `ds_config`) and the engine folders `step-N/<engine owner>/state`; the
workflow file is not read.
"""

from __future__ import annotations

import io
import pickle
import shutil
from collections.abc import Callable, Mapping
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from srpo_dsl.io import umask_modes
from srpo_dsl.lang.compile.graph import adapter_name
from srpo_dsl.rl.distributed.ds_import import import_deepspeed
from srpo_dsl.rl.engines.adapters import with_adapters
from srpo_dsl.rl.loop.checkpoint import ENGINE_TAG, latest_checkpoint, read_state
from srpo_dsl.runfolder import CONFIG, checkpoint_folder

ADAPTER, MERGED = "adapter", "merged"
OWN_LORA = "default"  # peft's adapter name of a policy's own `lora(...)`
PEFT_PREFIX = "base_model.model."  # how a PeftModel's state dict keys start
T = TypeVar("T")  # what a DeepSpeed reader returns


class ExportError(Exception):
    """A run or checkpoint that cannot be exported; the message is one line."""


@dataclass(frozen=True)
class EngineExport:
    """One saved engine, how to rebuild its module, and the policies it trained."""

    owner: str  # the policy the engine is saved under (a base, for adapters)
    folder: Path  # step-N/<owner>: DeepSpeed's checkpoint folder
    model: str  # the model it was built on: local path or repo id
    adapters: dict[str, dict[str, Any]] | None  # peft adapter name -> LoRA options; None: full fine-tuning
    policies: dict[str, str | None]  # trained policy -> its peft adapter (None: the whole model)


@dataclass(frozen=True)
class ExportPlan:
    """What `export_engine` writes for one checkpoint, checked against the run's config."""

    checkpoint: Path
    step: int
    zero: int  # ZeRO stage the engines were saved with
    engines: tuple[EngineExport, ...]

    @property
    def policies(self) -> list[str]:
        return [p for e in self.engines for p in e.policies]


def plan_export(run: Path, step: int | None = None) -> ExportPlan:
    """Check that `run` has the checkpoint (default: the latest) and that it matches the run's config;
    reads no weights."""
    checkpoint = find_checkpoint(run, step)
    config = checkpoint_config(checkpoint)
    try:
        models, layout = dict(config["models"]), dict(config["adapters"] or {})
        zero = int(config["ds_config"]["zero_optimization"]["stage"])
        bases = {o["base"]: [n for n, a in layout.items() if a["base"] == o["base"]] for o in layout.values()}
    except (KeyError, TypeError, ValueError) as exc:
        raise ExportError(
            f"{checkpoint / 'state.json'}: not a run config ({type(exc).__name__}: {exc})"
        ) from None
    owners = [p.name for p in sorted(checkpoint.iterdir()) if p.is_dir()]
    stray = [o for o in owners if o not in models or o in layout]
    if stray:
        raise ExportError(
            f"{checkpoint / stray[0]}: no engine of the run's config is saved under `{stray[0]}`"
        )
    missing = [b for b in bases if b not in owners]
    if missing:
        raise ExportError(
            f"{checkpoint} holds no state for `{missing[0]}`, the base of {', '.join(bases[missing[0]])}"
        )
    engines = []
    for owner in (name for name in models if name in owners):  # in the workflow's order
        keys = saved_module(checkpoint / owner, zero, mmap=True)  # names only: nothing is read yet
        if owner in bases:  # peft adapter names as the trainer gives them (`EventGraph.adapters`)
            adapters = {adapter_name(n): lora_options(layout[n]) for n in bases[owner]}
            policies: dict[str, str | None] = {n: adapter_name(n) for n in bases[owner]}
        elif any(k.startswith(PEFT_PREFIX) for k in keys):
            adapters, policies = {OWN_LORA: own_lora(config, owner)}, {owner: OWN_LORA}
        else:
            adapters, policies = None, {owner: None}
        engines.append(EngineExport(owner, checkpoint / owner, str(models[owner]), adapters, policies))
    return ExportPlan(checkpoint, int(checkpoint.name.removeprefix("step-")), zero, tuple(engines))


def find_checkpoint(run: Path, step: int | None) -> Path:
    """RUN/checkpoints/step-N for `step`, or the latest complete one."""
    if not run.is_dir():
        raise ExportError(f"cannot read {run}: no such folder")
    latest = latest_checkpoint(run)
    if latest is None:
        if not (run / CONFIG).is_file():
            raise ExportError(f"{run} is not a training run (no {CONFIG})")
        raise ExportError(f"{run} holds no checkpoint yet")
    if step is None:
        return latest
    folder = checkpoint_folder(run, step)
    if not folder.is_dir():
        raise ExportError(f"{run} has no checkpoint of step {step} (the latest is {latest.name})")
    return folder


def checkpoint_config(checkpoint: Path) -> Mapping[str, Any]:
    """The run config the checkpoint was written with."""
    try:
        return read_state(checkpoint)["config"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"{checkpoint}: no readable run state ({type(exc).__name__}: {exc})") from None


def lora_options(layout: Mapping[str, Any]) -> dict[str, Any]:
    """An adapter's LoRA options as `with_adapters` takes them (config.json's entry less its base)."""
    return {k: v for k, v in layout.items() if k != "base"}


def own_lora(config: Mapping[str, Any], policy: str) -> dict[str, Any]:
    """The options of a policy's own `lora(...)`, as the run's config records them."""
    options = (config.get("lora") or {}).get(policy)
    if not options:
        raise ExportError(f"`{policy}` has LoRA weights but the run's config records no lora(...) for it")
    return dict(options)


def _read(folder: Path, zero: int, load: Callable[[], T]) -> T:
    """`load()` with DeepSpeed's prints and progress bars hidden; its failures as one ExportError line."""
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            return load()
    except (OSError, RuntimeError, ValueError, KeyError, TypeError, EOFError, pickle.UnpicklingError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ExportError(
            f"{folder}: not a readable DeepSpeed checkpoint of ZeRO stage {zero} ({detail})"
        ) from None


def saved_module(folder: Path, zero: int, mmap: bool = False) -> dict[str, torch.Tensor]:
    """The module state an engine saved: its weights, except under ZeRO-3 (names only, values partitioned)."""
    import_deepspeed()
    from deepspeed.utils.zero_to_fp32 import get_model_state_file

    def load() -> dict[str, torch.Tensor]:
        file = get_model_state_file(str(folder / ENGINE_TAG), zero)
        return torch.load(file, map_location="cpu", mmap=mmap, weights_only=False)["module"]

    return _read(folder, zero, load)


def read_weights(folder: Path, zero: int) -> dict[str, torch.Tensor]:
    """An engine's module weights in fp32.

    ZeRO 1-3: DeepSpeed's `get_fp32_state_dict_from_zero_checkpoint` (the fp32 master weights, gathered).
    Stage 0 has no partitioned optimizer state and that function fails there (TypeError in DeepSpeed
    0.19), so the module state the engine saved is read instead (its training dtype, cast to fp32).
    """
    import_deepspeed()
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    if zero > 0:
        return _read(
            folder, zero, lambda: get_fp32_state_dict_from_zero_checkpoint(str(folder), tag=ENGINE_TAG)
        )
    return {k: v.float() if v.is_floating_point() else v for k, v in saved_module(folder, zero).items()}


def load_fp32_model(path: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def load_strict(module: torch.nn.Module, state: Mapping[str, torch.Tensor], where: Path) -> None:
    """`module.load_state_dict(state)`, every key and shape matching, or one ExportError line."""
    try:
        result = module.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape mismatch
        detail = next((line.strip() for line in str(exc).splitlines() if "size mismatch" in line), str(exc))
        raise ExportError(f"{where} does not match the run's config: {detail}") from None
    wrong = [f"missing {k}" for k in result.missing_keys] + [
        f"unexpected {k}" for k in result.unexpected_keys
    ]
    if wrong:
        raise ExportError(
            f"{where} does not match the run's config: {len(wrong)} keys differ ({wrong[0]}, ...)"
        )


def export_engine(engine: EngineExport, zero: int, folders: Mapping[str, Path]) -> None:
    """Write each of the engine's policies into `folders[policy]` (an existing, empty folder)."""
    module = load_fp32_model(engine.model)
    if engine.adapters is not None:
        module = with_adapters(module, engine.adapters)
    weights = read_weights(engine.folder, zero)
    if (bad := next((k for k, v in weights.items() if not bool(v.isfinite().all())), None)) is not None:
        raise ExportError(
            f"{engine.folder} holds weights that are not finite ({bad}): export an earlier step"
        )
    load_strict(module, weights, engine.folder)
    for policy, adapter in engine.policies.items():
        if adapter is None:
            save_model(module, engine.model, folders[policy] / MERGED)
        else:
            save_adapter(module, adapter, folders[policy] / ADAPTER)
            save_model(
                merged(engine.model, folders[policy] / ADAPTER), engine.model, folders[policy] / MERGED
            )


def save_adapter(module: Any, adapter: str, folder: Path) -> None:
    """peft's `save_pretrained` of `adapter` alone (peft writes a named adapter into a subfolder)."""
    tmp = folder.with_name(f".{folder.name}.peft")
    module.save_pretrained(str(tmp), selected_adapters=[adapter])
    written = tmp if adapter == OWN_LORA else tmp / adapter
    for card in tmp.glob("README.md"):  # peft's model card (in `tmp`) goes with the adapter
        card.replace(written / card.name)
    written.rename(folder)
    shutil.rmtree(tmp, ignore_errors=True)
    umask_modes(folder)  # safetensors writes 0600


def merged(model_path: str, adapter: Path) -> torch.nn.Module:
    """The base at `model_path` with the adapter saved at `adapter` merged into its weights."""
    from peft import PeftModel

    return PeftModel.from_pretrained(load_fp32_model(model_path), str(adapter)).merge_and_unload()


def save_model(model: Any, tokenizer_path: str, folder: Path) -> None:
    """A standalone Hugging Face checkpoint: the model's weights and config, and the tokenizer; its files
    get the modes the umask gives (safetensors writes its file 0600)."""
    from transformers import AutoTokenizer

    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(tokenizer_path).save_pretrained(str(folder))
    umask_modes(folder)
