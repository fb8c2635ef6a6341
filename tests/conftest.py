"""Shared fixtures: the embedded tiny model (built once per session) and a fast random model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from srpo_dsl.api.training import restore_environment
from srpo_dsl.launched import LAUNCH_VARIABLES
from tests.support.training import CHAT_TEMPLATE

# CI runs two test workers on two cores. There, a torch process with two OpenMP threads spins its second
# thread while waiting for a core (a quickstart step took 1.4x the time and CPU beside one busy process;
# the paper recipes' sweep test 5x). So each test process, and each process it starts, gets one thread
# unless the caller chose a count, and threads that wait sleep (the tests that give a run two threads on
# purpose, for bitwise reproducibility, keep them; the waiting policy changes no result). Set before
# any test imports torch, which reads them once.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

LAUNCHED_WITH = {
    name: os.environ.get(name) for name in LAUNCH_VARIABLES
}  # pytest's own (none, or a launcher's)


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`builtin:tiny`: the shipped weights (seed 0); other seeds build into `$SRPO_DSL_CACHE`."""
    from srpo_dsl.models.tiny import ensure_tiny_model

    cache = os.environ.get("SRPO_DSL_CACHE")
    return ensure_tiny_model(Path(cache) if cache else tmp_path_factory.mktemp("srpo-cache"), progress=False)


@pytest.fixture(scope="session")
def tiny_random_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init 1-layer Llama and a byte-level BPE tokenizer with a chat template, saved to disk."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["S 17+25=\\boxed{42}", "hello world", "the answer is"] * 10, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    path = tmp_path_factory.mktemp("random-model")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two different random 1-layer Llamas sharing a tokenizer (`tests/support/training.py`), per module."""
    from tests.support.training import make_models

    return make_models(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def dist():
    """This process as a data-parallel group of one (gloo on CPU), for the tests that build engines."""
    from srpo_dsl.rl.distributed.process_group import init_distributed

    return init_distributed("cpu")


@pytest.fixture(scope="module")
def client():
    """The language server (`python -m srpo_dsl lsp`) with bench/lsp_client.py's client, initialized on
    the repository; one per test module."""
    from tests.support.clitools import ROOT, load_bench

    c = load_bench("lsp_client").LspClient()
    c.initialize(ROOT)
    yield c
    c.close()


@pytest.fixture
def routed(tmp_path: Path) -> Path:
    """A copy of workflows/math_routed.srpo with its prompt folder (templates resolve from its folder)."""
    import shutil

    workflows = Path(__file__).resolve().parents[1] / "workflows"
    shutil.copytree(workflows / "math", tmp_path / "math")
    shutil.copy(workflows / "math_routed.srpo", tmp_path)
    return tmp_path / "math_routed.srpo"


@pytest.fixture(autouse=True)
def launch_variables_kept(request: pytest.FixtureRequest):
    """The launch variables (RANK=0, WORLD_SIZE=1, ...) a group of one sets in this process (the session's
    `dist`, or a test that trains here without the API, which takes them back: `api.training.released`)
    are seen by the tests that ask for `dist` only: another test's `srpo-dsl` subprocess would take itself
    for a launched rank. Each test gets back the variables it began with."""
    before = {name: os.environ.get(name) for name in LAUNCH_VARIABLES}
    if "dist" not in request.fixturenames:
        restore_environment(LAUNCHED_WITH)
    yield
    restore_environment(before)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with the most slow tests first, each file's tests in their order: CI's two workers take
    whole files (`--dist loadfile`) in this order, so the longest start early and the run does not end
    on one worker alone with a long file while the other idles (longest first, as in LPT scheduling)."""
    by_file: dict[Path, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.path, []).append(item)

    def slow(path: Path) -> int:
        return sum(item.get_closest_marker("slow") is not None for item in by_file[path])

    items[:] = [item for path in sorted(by_file, key=slow, reverse=True) for item in by_file[path]]
