"""A test's count of the processes that compile a workflow: with this folder first on PYTHONPATH and
SRPO_DSL_TEST_COMPILES naming a file, every call of `srpo_dsl.lang.analysis.analyze` (parse, check,
compile) appends its process's pid to that file (`tests/support/compiles/count.py` reads it). Nothing is imported
until srpo-dsl imports that module itself."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Any

TARGET = "srpo_dsl.lang.analysis"


class CountCompiles(importlib.abc.MetaPathFinder):
    """Finds the compiler's front door as Python would, and wraps its `analyze` once it is loaded."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def loaded(module: Any) -> None:
            load(module)
            analyze = module.analyze

            def counted(*args: Any, **kwargs: Any) -> Any:
                with open(os.environ["SRPO_DSL_TEST_COMPILES"], "a", encoding="utf-8") as f:
                    f.write(f"{os.getpid()}\n")
                return analyze(*args, **kwargs)

            module.analyze = counted

        spec.loader.exec_module = loaded
        return spec


if os.environ.get("SRPO_DSL_TEST_COMPILES"):
    sys.meta_path.insert(0, CountCompiles())
