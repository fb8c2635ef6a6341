"""srpo-dsl: multi-agent LLM workflows as text, compiled to event graphs, trained with SRPO.

The Python API (`srpo_dsl.load`, `Workflow`, `Run`, the errors: `srpo_dsl.api`, docs/python.md) is
imported on first use, so that `import srpo_dsl` stays light.
"""

import importlib
from typing import Any

from srpo_dsl.version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    api = importlib.import_module("srpo_dsl.api")
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'srpo_dsl' has no attribute {name!r}")
