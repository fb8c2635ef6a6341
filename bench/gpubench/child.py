"""A case of `bench/gpu_bench.py` in its own process: `python bench/gpubench/child.py KIND SPEC.json`,
KIND one of CASES. It writes its records (and prints its rows) itself; what it raises ends it with a
non-zero exit, which the bench records as that case's failure."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(BENCH.parent), str(BENCH)]  # not this folder: its modules are gpubench's

from gpubench import rollout  # noqa: E402 (after the path it is found on)
from gpubench.figures import steady  # noqa: E402
from gpubench.records import Recorder, case_record  # noqa: E402
from gpubench.shapes import SIZES, VOCAB  # noqa: E402


def quiet() -> None:
    import logging
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    for name in ("deepspeed", "DeepSpeed", "transformers", "trl", "accelerate", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def build(spec: dict[str, Any], rec: Recorder) -> None:
    """A random Qwen3-shaped model of the size, with the shipped tokenizer (`builtin:tiny`), saved at
    spec["model"]; its record holds its parameters, the mean prompt tokens of the training prompts, and
    whether the hf engine reports decode statistics (the rollout table's columns)."""
    import torch
    from train_bench import Setup
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from srpo_dsl.backends.chat import encode_prompts
    from srpo_dsl.models.specs import resolve_model_spec

    t0, size, device = time.perf_counter(), spec["size"], spec["device"]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_spec("builtin:tiny"))
    config = Qwen3Config(vocab_size=len(tokenizer) if size == "tiny" else VOCAB, tie_word_embeddings=True,
                         max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **SIZES[size])  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16 if device == "cuda" else torch.float32)
    model.save_pretrained(spec["model"])
    tokenizer.save_pretrained(spec["model"])
    prompts = [p for p, _ in Setup(Path(spec["workflow"]), 1, spec["batch"], 1).steps[0]]
    ids = encode_prompts(tokenizer, prompts, use_chat_template=bool(tokenizer.chat_template))
    figures = {"params": sum(p.numel() for p in model.parameters()), "prompt_tokens": statistics.mean(map(len, ids)),
               "decode_stats": rollout.has_decode_stats(), "seconds": time.perf_counter() - t0}  # fmt: skip
    text = f"model: random Qwen3 {size} shape, {figures['params']:,} parameters, built in {figures['seconds']:.0f} s"
    rec.case(case_record("build", size, "model", "done", figures), text + "\n")


def trl(spec: dict[str, Any], rec: Recorder) -> None:
    """TRL's GRPOTrainer on the same model, prompts, group, length and optimizer settings (`train_bench`)."""
    from train_bench import Setup, run_trl

    from gpubench.report import row

    setup = Setup(Path(spec["workflow"]), spec["steps"], spec["batch"], spec["group"])
    scratch = Path(tempfile.mkdtemp(prefix="gpu-bench-trl-"))
    run = run_trl(setup, spec["model"], spec["steps"], scratch, threads=4, device=spec["device"])
    figures = {"steps": len(run["step_times"]), "step_ms": 1000 * steady(run["step_times"]),
               "tokens_per_s": steady([t / s for t, s in zip(run["tokens"], run["step_times"])])} | run  # fmt: skip
    record = case_record("trl", spec["size"], "trl", "done", figures)
    rec.case(record, row("trl", "TRL GRPOTrainer", record))


CASES = {"build": build, "rollout": rollout.run, "trl": trl}


def main() -> None:
    kind, spec_path = sys.argv[1:]
    spec = json.loads(Path(spec_path).read_text())
    quiet()
    CASES[kind](spec, Recorder(Path(spec["records"]), spec["fields"]))


if __name__ == "__main__":
    main()
