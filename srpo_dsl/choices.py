"""srpo-dsl's fixed choices, in one place that imports nothing of srpo-dsl: settings of srpo-dsl itself, not
extension points. What plugins extend (objectives, aggregations, advantage estimators, set norms,
backends, rollout engines) are the registries of `srpo_dsl.registries`; the devices are
`srpo_dsl.devices.DEVICES`. The CLI's choices read all three.
"""

from __future__ import annotations

from typing import Literal, get_args

# A choice the Python API takes is a `Literal` (its annotation: `arguments.checked` refuses any other
# value) and its names, for the CLI's choices and the checks: one list.
Offload = Literal["none", "optimizer", "params", "all"]  # ZeRO offload to CPU (rl/engines/ds_engine.py)
OFFLOAD: tuple[str, ...] = get_args(Offload)
DecodeMode = Literal["auto", "dynamic", "static", "compiled"]  # the hf decode loops (backends/decoding.py)
DECODE_MODES: tuple[str, ...] = get_args(DecodeMode)
# How a generated turn ended (backends' `GenResult.finish_reason`, a trace member's `finish`, what
# `AGENT.finish == WORD` tests): the model's end-of-sequence token, a stop string, or max_tokens reached.
FINISH_REASONS = ("eos", "stop", "length")
FINISH = "finish"  # the attribute of an agent a condition reads its finish reason by: `solver.finish`
LAUNCHERS = ("ray",)  # launchers `train` starts its processes with (api/ray_launch.py); none: this machine
