"""srpo-dsl from Python (docs/python.md): `load` a workflow, inspect it, `run`, `evaluate` and `train` it.

    import srpo_dsl
    wf = srpo_dsl.load("workflows/quickstart.srpo")
    run = wf.train("runs/q", steps=20)

The command line is a thin layer over this API. Failures raise `SrpoDslError`s: `WorkflowError` (the
diagnostics), `UserCodeError` (the user's file and line), `UsageError`, `InputError`.
"""

from srpo_dsl.api.rollouts import DatasetResult, Evaluation, Rollouts, RolloutSummary
from srpo_dsl.api.runs import Run
from srpo_dsl.api.workflow import Workflow, load
from srpo_dsl.errors import InputError, SrpoDslError, UsageError
from srpo_dsl.lang.syntax.messages import WorkflowError
from srpo_dsl.runtime.usercode import UserCodeError

__all__ = [
    "DatasetResult",
    "Evaluation",
    "InputError",
    "RolloutSummary",
    "Rollouts",
    "Run",
    "SrpoDslError",
    "UsageError",
    "UserCodeError",
    "Workflow",
    "WorkflowError",
    "load",
]
