"""What the language accepts beyond its grammar: binding kinds and option blocks.

The option blocks are pydantic models, so the checker and the trainer share one definition
of every user-facing setting (the trainer reads `TrainOptions` and applies CLI overrides).
Lists of names are never restated: binding kinds are the registries here (each entry holds what
the checker needs, and what runs it by import path, imported at first use); output contracts,
objectives, set norms, estimators, aggregations and reward functions are the registries of
`srpo_dsl.registries`, read when an option is checked, so an entry a plugin registered in Python
is accepted. Nothing here imports torch.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from srpo_dsl.lang.checks.branches import BACKUPS
from srpo_dsl.lang.checks.declarations import Sampling
from srpo_dsl.lang.usercode.pycode import is_reference
from srpo_dsl.registries import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    OBJECTIVES,
    SET_NORMS,
    TRACKERS,
    Registry,
    load,
)

DEFAULT_MAX_TOKENS = 512
MAX_STOP_STRINGS = 16  # stop strings of one agent


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no inf or nan option


class Generation(_Options):
    """Sampling settings; on a policy they are defaults for its agents, on an agent they win."""

    temperature: float | None = Field(None, ge=0.0, description="the sampling temperature (default 1.0)")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling's p (default 1.0)")
    max_tokens: int | None = Field(None, ge=1, description="tokens per output (default 512)")
    stop_strings: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        max_length=MAX_STOP_STRINGS,
        description='a turn ends at the first of these strings, kept in the output: "</calc>" or a list '
        '["</search>", "</answer>"] (default none)',
    )
    top_k: int | None = Field(
        None, ge=0, description="sample from the k most likely tokens only (default 0: off)"
    )
    frequency_penalty: float | None = Field(
        None, ge=-2.0, le=2.0, description="minus this times a token's count in the output so far (default 0)"
    )
    presence_penalty: float | None = Field(
        None, ge=-2.0, le=2.0, description="minus this from every token already in the output (default 0)"
    )
    repetition_penalty: float | None = Field(
        None,
        gt=0.0,
        le=10.0,
        description="a token already in the prompt or output: its logit divided by this if positive, "
        "multiplied if negative (default 1.0: off)",
    )
    min_tokens: int | None = Field(
        None, ge=0, description="no end of sequence and no stop string before this many tokens (default 0)"
    )

    @field_validator("stop_strings", mode="before")
    @classmethod
    def _one_or_a_list(cls, value: object) -> object:
        """A single string is a list of one."""
        return (value,) if isinstance(value, str) else value

    @field_validator("stop_strings")
    @classmethod
    def _not_empty(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not all(value):
            raise PydanticCustomError("empty_stop", "a stop string is not empty")
        return value


# Each sampling setting's value where neither the agent nor its policy gives one.
class SamplingDefaults(Sampling):
    """The type of `SAMPLING_DEFAULTS`: each of `Generation`'s settings, as an agent uses it (the
    controls of `Sampling`, and these three)."""

    temperature: float
    top_p: float
    max_tokens: int


SAMPLING_DEFAULTS: SamplingDefaults = {
    "temperature": 1.0,
    "top_p": 1.0,
    "max_tokens": DEFAULT_MAX_TOKENS,
    "stop_strings": (),
    "top_k": 0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_tokens": 0,
}


Stop = Literal["pool", "replica"]  # an acting pool's `stop` option: its replicas stop together, or each alone
STOPS: tuple[Stop, ...] = typing.get_args(Stop)


class AgentOptions(Generation):
    """An agent's `with (...)`: its sampling settings, then how its outputs are generated and trained.
    Every field's description is its documentation (completion; the table in docs/dsl.md)."""

    retries: int = Field(
        0,
        ge=0,
        le=100,
        description="resample an output that breaks its contract up to N times (all in one batch)",
    )
    trained: bool = Field(True, description="false: its outputs are generated but never trained")
    budget: int | None = Field(
        None, ge=1, description="tokens shared by all the turns of one replica in an episode"
    )
    calls: int = Field(1, ge=1, le=100, description="tool calls an acting output may make in one turn")
    stop: Stop = Field(
        "pool", description="pool: the replicas act until all answer; replica: each stops at its own answer"
    )
    observe: str | None = Field(
        None,
        description="a template: each replica keeps its turns as one conversation, and every later turn "
        "appends this template's rendering (of `new_history`) as the next user message",
    )


class LoraOptions(_Options):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    targets: str = "all-linear"


class AdapterPolicy(LoraOptions):
    """`adapter(BASE, r = 16, ...)`: a LoRA adapter of its own on a frozen base policy."""

    base: str


# The native tool-call formats a policy's model may be trained on, each with what its chat template writes
# when it is given tools (a local model's template without it is E018).
ToolFormat = Literal["hermes", "llama3"]
TOOL_FORMATS: tuple[ToolFormat, ...] = typing.get_args(ToolFormat)
TOOL_FORMAT_MARKERS: dict[ToolFormat, str] = {"hermes": "<tool_call>", "llama3": '"parameters"'}


class HfPolicy(_Options):
    model: str
    tool_format: ToolFormat | None = Field(
        None,
        description="the model's native tool calls: hermes (`<tool_call>{json}</tool_call>`: Qwen, Hermes) "
        "or llama3 (a JSON object); its agents' tools go to its chat template as JSON schemas",
    )
    chat_template: str | None = Field(
        None,
        description="a Jinja file (relative to the workflow) that replaces the model's chat template in "
        "every render: e.g. a prefix-preserving one that conversation agents need (`qwen3_training.jinja`)",
    )


class BuiltinPolicy(_Options):
    name: Literal["tiny"]


class DataTask(_Options):
    """`math(...)`, `qa(...)`, `jsonl(...)`, `parquet(...)`, `dataset(...)`: tasks read from local data
    (`srpo_dsl.data_sources`: a file, a `save_to_disk` folder, `hf:NAME` from the local cache).

    `math` and `qa` need a question and an answer in every row; the generic `jsonl`, `parquet` and
    `dataset` keep rows as they are (a Python reward reads the fields it needs). `split` (`eval_split`
    for the held-out rows) picks the split of a DatasetDict folder or a `hf:` name."""

    data: str
    eval_data: str | None = None
    question: str | None = None  # field mapping overrides
    answer: str | None = None
    id: str | None = None
    limit: int | None = Field(None, ge=1)
    split: str = "train"
    eval_split: str | None = None


ArithMix = Literal["sums", "graded"]  # the `arith` task's question mixes (srpo_dsl.envs.arith)
ARITH_MIXES: tuple[ArithMix, ...] = typing.get_args(ArithMix)


class ArithTask(_Options):
    """`arith(...)`: generated questions (`srpo_dsl.envs.arith`); `mix`: `sums` (a+b) or `graded`
    (easy one-digit sums, medium two-digit sums, hard two-digit products; rows carry `difficulty`)."""

    n: int = Field(1000, ge=1)
    seed: int = 0
    max_operand: int = Field(99, ge=1)
    eval_n: int = Field(128, ge=1)
    mix: ArithMix = "sums"


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


class PythonEnv(_Options):
    """The options srpo-dsl keeps of an environment (`pycode.ENV_OPTIONS`); the others go to the function."""

    timeout: float = Field(30.0, gt=0, description="seconds per step of the environment")


def registered(registry: Mapping[str, object], value: str, *, code: bool = False) -> str:
    """`value` if `registry` holds it (or, with `code`, it names Python code); else a literal error."""
    if value in registry or (code and is_reference(value)):
        return value
    names = [f"'{n}'" for n in registry]
    expected = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
    if code:
        expected += ', or a Python function "file.py:function"'
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


# The registry each `train with` option that names an entry is checked against (and completion offers).
TRAIN_CHOICES: dict[str, Mapping[str, object]] = {
    "objective": OBJECTIVES,
    "advantage": ADVANTAGE_ESTIMATORS,
    "aggregation": AGGREGATIONS,
    "set_norm": SET_NORMS,
    "backup": BACKUPS,
    "report_to": TRACKERS,  # or several, comma-separated, or `none`
}
NO_TRACKER = "none"  # `report_to = none`: metrics.jsonl and eval.jsonl only
TRAIN_WORDS = {"report_to": (NO_TRACKER,)}  # the words a `train with` option takes besides its registry's


def tracker_list(value: object) -> str:
    """`report_to` as the options hold it: registered tracker names joined by commas (each once, in the
    order given), or `none`. Accepts `"tensorboard, wandb"`, a bare name, or (the Python API) a list."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "Input should be a valid string", {})
    names = list(dict.fromkeys(n.strip() for n in value.split(",")))
    if names == [NO_TRACKER]:
        return NO_TRACKER
    if NO_TRACKER in names:
        raise PydanticCustomError("value_error", "'none' reports to no tracker: name it alone", {})
    for name in names:
        if name not in TRAIN_CHOICES["report_to"]:
            known = ", ".join(f"'{n}'" for n in TRAIN_CHOICES["report_to"])
            raise PydanticCustomError(
                "literal_error",
                "Input should be {known}, several joined by commas (\"tensorboard,wandb\"), or 'none'; "
                "got '{name}'",
                {"known": known, "name": name},
            )
    return ",".join(names)


class TrainOptions(_Options):
    """The `train with (...)` block; every field can be overridden on the command line.
    Every field's description is its documentation (completion, hover; the table in docs/dsl.md)."""

    objective: str = Field(
        "srpo",
        description="a registered objective (srpo: SRPO; traj: SRPO with the episode as one set), "
        'or "FILE.py:function"',
    )
    advantage: str | None = Field(
        None,
        description="a registered advantage estimator (event: one sample per event and step; episode: "
        "one per episode; state: GiGPO, the episode's plus one per step of the same state key), "
        'or "FILE.py:function"; default: the objective\'s',
    )
    aggregation: str | None = Field(
        None,
        validate_default=True,
        description="a registered aggregation: how the terms become J; default: the objective's own",
    )
    set_norm: str = Field("sqrt", description="SRPO's set scale c(K), a registered set norm (sqrt: K^-1/2)")
    clip: float = Field(0.2, gt=0.0, description="the ratio clip epsilon")
    group: int = Field(8, ge=1, description="rollouts per prompt (G)")
    batch: int = Field(8, ge=1, description="prompts per step")
    lr: float = Field(1e-6, gt=0.0, le=1.0, description="the learning rate (at most 1)")
    steps: int = Field(100, ge=1, description="optimizer steps")
    epochs: int = Field(1, ge=1, description="optimizer passes over each rollout batch")
    micro_batches: int = Field(
        1, ge=1, description="gradient-accumulation micro-batches (events never split)"
    )
    max_tokens_per_micro_batch: int | None = Field(
        None,
        ge=1,
        description="fill micro-batches to this many tokens (rows x the longest row), as many as needed",
    )
    pack_rows: bool | None = Field(
        None,
        description="score a micro-batch's rows packed into one sequence, without padding (default: on "
        "when an agent keeps a conversation)",
    )
    gradient_checkpointing: bool = Field(
        False, description="recompute each layer's activations in the backward pass (less memory, more time)"
    )
    kl: float = Field(0.0, ge=0.0, description="the weight of the k3 KL to the initial policy")
    entropy: float = Field(0.0, ge=0.0, description="the weight of the entropy bonus")
    zero: int = Field(0, ge=0, le=3, description="the DeepSpeed ZeRO stage, 0 to 3")
    grad_clip: float = Field(1.0, gt=0.0, description="the gradient-norm clip")
    warmup: int = Field(0, ge=0, description="steps of linear learning-rate warm-up")
    eval_every: int = Field(10, ge=1, description="steps between held-out evaluations")
    eval_size: int = Field(64, ge=1, description="held-out questions per evaluation")
    eval_k: int = Field(4, ge=1, description="samples per held-out question")
    save_every: int = Field(20, ge=1, description="steps between checkpoints")
    seed: int = Field(0, description="the seed of sampling, data order and initialisation")
    old_logprobs: Literal["recompute", "rollout"] = Field(
        "recompute",
        description="the ratio's old log-probs: recompute (a forward pass before the update) or rollout",
    )
    rollout_workers: int = Field(
        0, ge=0, description="processes that generate while the trainer trains (0: the trainer generates)"
    )
    max_staleness: int = Field(
        1,
        ge=0,
        description="S: no member of a trained-on episode was generated with weights more than S optimizer "
        "steps older than the trainer's",
    )
    rollout_weights: Literal["newest", "scheduled"] = Field(
        "newest",
        description="the weights a rollout worker generates with: newest (the newest it holds, taken before "
        "each generation call) or scheduled (each batch all with its step's version: bit-reproducible)",
    )
    importance_cap: float = Field(2.0, ge=1.0, description="C: the cap of a stale event's importance weight")
    backup: str = Field(
        "mean", description="a tree branch's return: the mean or the max of its alternatives' returns"
    )
    discount: float = Field(
        1.0, gt=0.0, le=1.0, description="gamma: an alternative's return is its score + gamma * its subtree's"
    )
    report_to: str = Field(
        "tensorboard",
        description="the experiment trackers the run reports to: tensorboard, wandb, mlflow, several "
        'joined by commas ("tensorboard,mlflow"), or none (metrics.jsonl and eval.jsonl only)',
    )

    @property
    def trackers(self) -> tuple[str, ...]:
        """The trackers of `report_to`, in order (none: ())."""
        return () if self.report_to == NO_TRACKER else tuple(self.report_to.split(","))

    @field_validator("objective")
    @classmethod
    def _objective(cls, value: str) -> str:
        return registered(TRAIN_CHOICES["objective"], value, code=True)

    @field_validator("advantage")
    @classmethod
    def _advantage(cls, value: str | None) -> str | None:
        return None if value is None else registered(TRAIN_CHOICES["advantage"], value, code=True)

    @field_validator("aggregation")
    @classmethod
    def _aggregation(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and is_reference(info.data.get("objective")):
            expected = ", ".join(AGGREGATIONS)
            raise PydanticCustomError(
                "missing", "Field required with a Python objective ({expected})", {"expected": expected}
            )
        return None if value is None else registered(TRAIN_CHOICES["aggregation"], value)

    @field_validator("max_tokens_per_micro_batch")
    @classmethod
    def _token_budget(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("micro_batches", 1) != 1:
            raise PydanticCustomError(
                "value_error", "set micro_batches or max_tokens_per_micro_batch, not both", {}
            )
        return value

    @field_validator("backup")
    @classmethod
    def _backup(cls, value: str) -> str:
        return registered(TRAIN_CHOICES["backup"], value)

    @field_validator("report_to", mode="before")
    @classmethod
    def _report_to(cls, value: object) -> str:
        return tracker_list(value)

    @field_validator("set_norm")
    @classmethod
    def _set_norm(cls, value: str) -> str:
        return registered(TRAIN_CHOICES["set_norm"], value)


def option_choices(model: type[BaseModel], name: str) -> list[str]:
    """The values option `name` of `model` takes by name, as a workflow writes them: a registry's entries
    (`TRAIN_CHOICES`, and `TRAIN_WORDS`), a `Literal`'s, or `true` and `false`; [] for any other option
    (a number, a path)."""
    if model is TrainOptions and name in TRAIN_CHOICES:
        return [*TRAIN_CHOICES[name], *TRAIN_WORDS.get(name, ())]
    info = model.model_fields.get(name)
    if info is None:
        return []
    kinds = [info.annotation]
    if typing.get_origin(info.annotation) in (typing.Union, types.UnionType):  # `X | None`: X
        kinds = [a for a in typing.get_args(info.annotation) if a is not type(None)]
    if kinds == [bool]:
        return ["true", "false"]
    return [str(v) for a in kinds if typing.get_origin(a) is typing.Literal for v in typing.get_args(a)]


@dataclass(frozen=True)
class BindingKind:
    """A built-in kind of policy, task or tool: its option model, the names of its positional arguments
    in order, the options that are paths (relative to the workflow's folder), and what makes it.

    `make` (a function, or its import path, imported at first use): a task kind's loader
    `(options, split, data, limit) -> [row, ...]` (srpo_dsl.envs.data), a tool kind's retriever
    `(**options) -> Retriever` (srpo_dsl.envs.retrieval); policies are built by the backends.
    `probe` (the same): a tool kind's check that it answers, before anything loads (`prober`).
    """

    options: type[_Options]
    positional: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    make: str | Callable[..., Any] | None = field(default=None, compare=False)
    probe: str | Callable[..., None] | None = field(default=None, compare=False)

    @property
    def maker(self) -> Callable[..., Any]:
        if self.make is None:
            raise ValueError(f"a {self.options.__name__} binding is not made from its options")
        return load(self.make) if isinstance(self.make, str) else self.make

    @property
    def prober(self) -> Callable[..., None] | None:
        """A tool kind's cheap check that it answers, `(**options) -> None` raising its error, run before
        anything loads (an HTTP retrieval server: one query); None: nothing to ask before the run."""
        return load(self.probe) if isinstance(self.probe, str) else self.probe

    def resolved(self, options: Mapping[str, object], resolve: Callable[[str], object]) -> dict[str, object]:
        """`options` with each path option (when given) resolved by `resolve` (the workflow's folder)."""
        return {k: resolve(str(v)) if k in self.paths and v is not None else v for k, v in options.items()}


POLICY_KINDS: Registry[BindingKind] = Registry("policy kind")
POLICY_KINDS.add("hf", BindingKind(HfPolicy, ("model",)))
POLICY_KINDS.add("builtin", BindingKind(BuiltinPolicy, ("name",)))
POLICY_KINDS.add("adapter", BindingKind(AdapterPolicy, ("base",)))

DATA, DATA_PATHS = "srpo_dsl.envs.data", ("data", "eval_data")
TASK_KINDS: Registry[BindingKind] = Registry("task kind")
TASK_KINDS.add("math", BindingKind(DataTask, ("data",), DATA_PATHS, f"{DATA}:MATH"))
TASK_KINDS.add("qa", BindingKind(DataTask, ("data",), DATA_PATHS, f"{DATA}:QA"))
TASK_KINDS.add("arith", BindingKind(ArithTask, (), (), f"{DATA}:ARITH"))
TASK_KINDS.add("jsonl", BindingKind(DataTask, ("data",), DATA_PATHS, f"{DATA}:JSONL"))
TASK_KINDS.add("parquet", BindingKind(DataTask, ("data",), DATA_PATHS, f"{DATA}:PARQUET"))
TASK_KINDS.add("dataset", BindingKind(DataTask, ("data",), DATA_PATHS, f"{DATA}:DATASET"))

RETRIEVAL = "srpo_dsl.envs.retrieval"
TOOL_KINDS: Registry[BindingKind] = Registry("tool kind")  # the retrievers
TOOL_KINDS.add("bm25", BindingKind(Bm25Tool, ("corpus",), ("corpus",), f"{RETRIEVAL}:bm25_retriever"))
TOOL_KINDS.add(
    "http", BindingKind(HttpTool, ("url",), (), f"{RETRIEVAL}:HttpRetriever", f"{RETRIEVAL}:probe_server")
)


@dataclass(frozen=True)
class ContextVariable:
    """A top-level name every role prompt template may read: its type and what it holds."""

    type: str
    doc: str


# The top-level names a role's prompt template may use (the runtime provides all of them, in every
# workflow: `Episode.context`); the checker, the renderer and the editor read them from here.
TEMPLATE_VARIABLES: dict[str, ContextVariable] = {
    "task": ContextVariable("dict", "the task record: `id`, `question`, `answer`, `answers`, ..."),
    "step": ContextVariable("int", "1-based event counter in the episode"),
    "turn": ContextVariable("int", "1-based loop iteration"),
    "max_turns": ContextVariable("int", "the loop bound"),
    "role": ContextVariable("str", "the agent's name"),
    "replica": ContextVariable("int", "1-based index of this member in its pool"),
    "pool_size": ContextVariable("int", "how many members the agent's pool has"),
    "team_context": ContextVariable(
        "list[dict]",
        "the outputs committed before this role acts, in order: `{role, replica, text, valid, value}` "
        "(members of one parallel event never see each other's current outputs)",
    ),
    "feedback": ContextVariable("list[str]", "verifier output texts so far"),
    "documents": ContextVariable("list[str]", "retrieved document texts so far"),
    "observations": ContextVariable(
        "list[dict]",
        "Python tools' `{tool, query, result|error}` and environments' `{env, agent, result}` so far",
    ),
    "observation": ContextVariable(
        "str | None", "the latest text an environment addressed to this role, or None before any"
    ),
    "memory": ContextVariable("dict", "`accepted`, `feedback`, `documents` and `observations` so far"),
    "actions": ContextVariable("list[str]", "what an acting agent may take in this step (else empty)"),
    "history": ContextVariable(
        "list[dict]",
        'the episode so far in order: each output `{kind: "output", role, replica, text, valid, value}` '
        'and each observation `{kind: "observation", replica, ...}`',
    ),
    "new_history": ContextVariable(
        "list[dict]",
        "the part of `history` after this replica's own last output (all of it before its first)",
    ),
}
CONTEXT_VARIABLES = frozenset(TEMPLATE_VARIABLES)
