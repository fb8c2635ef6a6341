"""Which model each policy loads (`srpo_dsl.models.specs`): specs resolved above the backends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from srpo_dsl.errors import UsageError
from srpo_dsl.lang.analysis import load_graph
from srpo_dsl.models.specs import policy_models, resolve_model_spec
from srpo_dsl.models.tiny import SHIPPED

ROOT = Path(__file__).resolve().parents[2]


def test_specs_resolve_to_what_loaders_take(tmp_path: Path) -> None:
    assert resolve_model_spec("builtin:tiny") == resolve_model_spec("hf:builtin:tiny") == str(SHIPPED)
    assert resolve_model_spec("hf:Qwen/Qwen3-4B") == resolve_model_spec("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"
    (tmp_path / "models" / "mine").mkdir(parents=True)
    assert resolve_model_spec(f"{tmp_path}/models/mine") == f"{tmp_path}/models/mine"


@pytest.mark.parametrize("spec", ["/nonexistent", "./models/none", "hf:../none", "runs/x/export/merged"])
def test_a_path_that_is_not_there_is_one_line_and_nothing_is_downloaded(spec: str) -> None:
    """A spec the hub cannot take as a repo id is a path: missing, it is said so (not the hub's
    "Repo id must use alphanumeric chars" nor a download attempt)."""
    with pytest.raises(UsageError) as err:
        resolve_model_spec(spec)
    assert str(err.value) == (
        f"model `{spec}`: no such file or folder (a path, not a Hugging Face repo id: nothing is downloaded)"
    )


def test_adapters_load_their_base_unless_given_a_model_of_their_own(tmp_path: Path) -> None:
    graph = load_graph(ROOT / "workflows/quickstart_adapters.srpo")
    assert policy_models(graph, {}) == {"base": str(SHIPPED)}  # the adapters generate with the base's
    merged = tmp_path / "export" / "solving" / "merged"
    merged.mkdir(parents=True)
    mine = policy_models(graph, {"solving": f"hf:{merged}"})
    assert mine == {"base": str(SHIPPED), "solving": str(merged)}
    script = policy_models(graph, dict.fromkeys(graph.policies, "replies.json"), resolve=False)
    assert script == dict.fromkeys(["base", "solving", "verifying", "answering"], "replies.json")


def test_resolving_the_shipped_tiny_model_imports_neither_torch_nor_transformers() -> None:
    """Only building `builtin:tiny` (a missing folder) needs them; finding the shipped one does not."""
    code = (
        "import sys\n"
        "from srpo_dsl.models.specs import local_tokenizer, resolve_model_spec\n"
        "from srpo_dsl.models.tiny import SHIPPED\n"
        "assert resolve_model_spec('builtin:tiny') == local_tokenizer('builtin:tiny') == str(SHIPPED)\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules)\n"
        "assert heavy == [], heavy\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
