"""DeepSpeed, imported without the MLflow import that its autotuner makes.

`import deepspeed` imports `deepspeed.autotuning.autotuner`, which imports MLflow where it is
installed: about 1.5 s of every `train` process's start (half of DeepSpeed's own import), for an
autotuner no run here starts. `import_deepspeed()`, the one way srpo-dsl imports DeepSpeed, hides
MLflow from that first import alone; srpo-dsl's MLflow tracker imports it as usual afterwards.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def import_deepspeed() -> ModuleType:
    """The `deepspeed` module, imported on the first call with MLflow hidden from it."""
    if "deepspeed" in sys.modules:
        return sys.modules["deepspeed"]
    hide = "mlflow" not in sys.modules
    if hide:
        sys.modules["mlflow"] = None  # `import mlflow` raises ImportError: the autotuner goes without
    try:
        return importlib.import_module("deepspeed")
    finally:
        if hide:
            del sys.modules["mlflow"]
