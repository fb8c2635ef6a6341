"""What the language accepts beyond its grammar: output contracts, binding kinds, option blocks.

The option blocks are pydantic models, so the checker and the trainer share one definition
of every user-facing setting (the trainer reads `TrainOptions` and applies CLI overrides).
Lists of names are not restated here: objectives, set norms and the like come from
`srpo_dsl.rl.names`, reward functions from their registry; neither imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from srpo_dsl.envs.rewards import REWARDS
from srpo_dsl.rl.names import OBJECTIVES, OLD_LOGPROBS, SET_NORMS


@dataclass(frozen=True)
class ContractSpec:
    """An output contract: what its arguments are (`pool` for route, `words` for verdict)."""

    args: Literal["none", "pool", "words", "tag"]
    describe: str


CONTRACTS: dict[str, ContractSpec] = {
    "route": ContractSpec("pool", "`<route>1,3</route>` or `<route>STOP</route>` over a pool"),
    "verdict": ContractSpec("words", "exactly one `<verify>WORD</verify>` with an allowed word"),
    "boxed": ContractSpec("none", "an answer in `\\boxed{...}`"),
    "final_boxed": ContractSpec("none", "one `FINAL: \\boxed{...}`"),
    "search": ContractSpec("none", "`<think>...</think>` and exactly one `<search>query</search>`"),
    "answer": ContractSpec("none", "`<think>...</think>` and exactly one `<answer>...</answer>`"),
    "tag": ContractSpec("tag", "exactly one `<NAME>...</NAME>` outside thinking (NAME as declared)"),
    "text": ContractSpec("none", "free text"),
}

REWARD_FUNCTIONS = tuple(REWARDS)
DEFAULT_MAX_TOKENS = 512


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Generation(_Options):
    """Sampling settings; on a policy they are defaults for its agents, on an agent they win."""

    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)


class LoraOptions(_Options):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    targets: str = "all-linear"


class AdapterPolicy(LoraOptions):
    """`adapter(BASE, r = 16, ...)`: a LoRA adapter of its own on a frozen base policy."""

    base: str


class HfPolicy(_Options):
    model: str


class BuiltinPolicy(_Options):
    name: Literal["tiny"]


class DataTask(_Options):
    """`math(...)`, `qa(...)`, `jsonl(...)`, `parquet(...)`: tasks read from a local file.

    `math` and `qa` need a question and an answer in every row; the generic `jsonl` and
    `parquet` keep rows as they are (a Python reward reads the fields it needs)."""

    data: str
    eval_data: str | None = None
    question: str | None = None  # field mapping overrides
    answer: str | None = None
    id: str | None = None
    limit: int | None = Field(None, ge=1)


class ArithTask(_Options):
    n: int = Field(1000, ge=1)
    seed: int = 0
    max_operand: int = Field(99, ge=1)
    eval_n: int = Field(128, ge=1)


class Bm25Tool(_Options):
    corpus: str
    top_k: int = Field(3, ge=1)


class HttpTool(_Options):
    url: str
    top_k: int = Field(3, ge=1)
    timeout: float = Field(10.0, gt=0)


class PythonTool(_Options):
    """The options srpo-dsl keeps of a Python tool (`pycode.TOOL_OPTIONS`); the others go to the function."""

    timeout: float = Field(30.0, gt=0, description="seconds per call of the function")
    batch: int | None = Field(None, ge=1, description="queries per call (default: all of a round)")


class TrainOptions(_Options):
    """The `train with (...)` block; every field can be overridden on the command line."""

    objective: Literal[OBJECTIVES] = "srpo"
    set_norm: Literal[SET_NORMS] = "sqrt"
    clip: float = Field(0.2, gt=0.0)
    group: int = Field(8, ge=1, description="rollouts per prompt (G)")
    batch: int = Field(8, ge=1, description="prompts per step")
    lr: float = Field(1e-6, gt=0.0)
    steps: int = Field(100, ge=1)
    epochs: int = Field(1, ge=1, description="optimizer passes over each rollout batch")
    micro_batches: int = Field(1, ge=1)
    kl: float = Field(0.0, ge=0.0)
    entropy: float = Field(0.0, ge=0.0)
    zero: int = Field(0, ge=0, le=3)
    grad_clip: float = Field(1.0, gt=0.0)
    warmup: int = Field(0, ge=0)
    eval_every: int = Field(10, ge=1)
    eval_size: int = Field(64, ge=1)
    eval_k: int = Field(4, ge=1)
    save_every: int = Field(20, ge=1)
    seed: int = 0
    old_logprobs: Literal[OLD_LOGPROBS] = "recompute"


# Binding kinds: the option model and the names of positional arguments, in order.
POLICY_KINDS: dict[str, tuple[type[_Options], tuple[str, ...]]] = {
    "hf": (HfPolicy, ("model",)),
    "builtin": (BuiltinPolicy, ("name",)),
    "adapter": (AdapterPolicy, ("base",)),
}
TASK_KINDS: dict[str, tuple[type[_Options], tuple[str, ...]]] = {
    "math": (DataTask, ("data",)),
    "qa": (DataTask, ("data",)),
    "arith": (ArithTask, ()),
    "jsonl": (DataTask, ("data",)),
    "parquet": (DataTask, ("data",)),
}
TOOL_KINDS: dict[str, tuple[type[_Options], tuple[str, ...]]] = {
    "bm25": (Bm25Tool, ("corpus",)),
    "http": (HttpTool, ("url",)),
}

# The top-level names a role's prompt template may use (the runtime provides all of them).
CONTEXT_VARIABLES = frozenset(
    {
        "task",
        "step",
        "turn",
        "max_turns",
        "role",
        "replica",
        "pool_size",
        "team_context",
        "feedback",
        "documents",
        "observations",
        "memory",
    }
)
