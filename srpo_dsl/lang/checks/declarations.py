"""The resolved declarations a compiled graph carries: policies, agents, task and tool bindings, the reward.

The checker builds them from the syntax tree (names resolved, options validated); `EventGraph` holds
them, and every later stage (executor, trainer, metrics) reads them from there. `attrs()` is each one's
entry in the graph attributes of the documented `networkx.DiGraph` (docs/dsl.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from srpo_dsl.lang.usercode.pycode import CodeRef


class Sampling(TypedDict):
    """An agent's sampling controls beyond temperature, top_p and max_tokens
    (`lang.checks.schema.Generation`), named as the engines' requests name them
    (`backends.base.GenRequest`)."""

    stop_strings: tuple[str, ...]
    top_k: int
    frequency_penalty: float
    presence_penalty: float
    repetition_penalty: float
    min_tokens: int


SAMPLING_CONTROLS = tuple(Sampling.__annotations__)  # their names, in order


def sampling_attrs(agent: AgentInfo) -> dict[str, object]:
    """An agent's sampling controls as graph attributes: JSON data (the stop strings a list)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in agent.sampling().items()}


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    kind: str  # hf | builtin | adapter
    model: str  # repo id, local path or `builtin:tiny` (an adapter: its base's)
    trainable: bool
    lora: dict[str, object] | None  # LoRA options: of the policy's own `lora(...)`, or of an adapter
    generation: dict[str, object]  # its `Generation` options (None: unset)
    base: str | None = None  # an adapter's base policy (frozen; it holds the weights)
    tool_format: str | None = None  # the model's native tool calls (`schema.TOOL_FORMATS`); None: none
    chat_template: str | None = None  # the text of `chat_template = "FILE"`; None: the model's own

    def attrs(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "model": self.model,
            "trainable": self.trainable,
            "lora": self.lora,
            "generation": self.generation,
            **({"tool_format": self.tool_format} if self.tool_format else {}),  # graphs without: unchanged
            **({"chat_template": self.chat_template} if self.chat_template else {}),
        }


@dataclass(frozen=True)
class AgentInfo:
    name: str
    replicas: int
    policy: str
    prompt: str
    contract: str
    contract_args: tuple[str, ...]
    max_tokens: int
    temperature: float
    top_p: float
    parser: CodeRef | None = None  # a Python contract (`contract` is then its reference)
    actions: tuple[str, ...] = ()  # an acting contract's actions, the final one last; () if it does not act
    retries: int = 0  # resamples of an output that breaks its contract, before it counts as invalid
    trained: bool = True  # False: its outputs are left out of the update
    budget: int | None = None  # tokens shared by all the turns of one replica in an episode
    calls: int = 1  # tool calls one acting output may make
    stop: str = "pool"  # `replica`: each replica stops taking turns at its own final action
    observe: str | None = None  # a conversation agent's template for the messages of its later turns
    stop_strings: tuple[str, ...] = ()  # a turn ends at the first of these (kept in its text)
    top_k: int = 0  # 0: off
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0  # 1: off
    min_tokens: int = 0
    system: str | None = None  # the template of the system message each first turn starts with
    tools: tuple[str, ...] = ()  # the JSON schemas its chat template is given (a policy with `tool_format`)
    tool_format: str | None = None  # its policy's: how its tool calls are parsed (`runtime.toolcalls`)

    @property
    def final_action(self) -> str | None:
        """The action that ends the agent's turns (its answer): the last one its contract lists."""
        return self.actions[-1] if self.actions else None

    def attrs(self) -> dict[str, object]:
        return {
            "replicas": self.replicas,
            "policy": self.policy,
            "prompt": self.prompt,
            "contract": self.contract,
            "contract_args": list(self.contract_args),
            "actions": list(self.actions),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "retries": self.retries,
            "trained": self.trained,
            "budget": self.budget,
            "calls": self.calls,
            "stop": self.stop,
            "observe": self.observe,
            "sampling": sampling_attrs(self),
            **({"system": self.system} if self.system is not None else {}),  # graphs without one unchanged
            **({"tools": [json.loads(t) for t in self.tools]} if self.tools else {}),
        }

    def sampling(self) -> Sampling:
        """The sampling controls beyond temperature, top_p and max_tokens, by their `GenRequest` names."""
        return Sampling(
            stop_strings=self.stop_strings,
            top_k=self.top_k,
            frequency_penalty=self.frequency_penalty,
            presence_penalty=self.presence_penalty,
            repetition_penalty=self.repetition_penalty,
            min_tokens=self.min_tokens,
        )

    def max_tokens_left(self, spent: int) -> int:
        """A turn's max_tokens after a replica spent `spent` tokens: its own, within what its budget leaves
        (0: nothing left, the turn is not generated)."""
        if self.budget is None:
            return self.max_tokens
        return max(0, min(self.max_tokens, self.budget - spent))


@dataclass(frozen=True)
class RewardInfo:
    fn: str  # a built-in name, the reference of a Python reward, or an environment's name
    agent: str | None  # the rewarded agent; None for an environment's reward
    field: str | None  # the task field of a built-in reward, e.g. "answer"
    penalty: float
    code: CodeRef | None = None
    env: str | None = None  # `reward ENV`: the sum of the rewards the environment returned

    def attrs(self) -> dict[str, object]:
        return {
            "fn": self.fn,
            "agent": self.agent,
            "field": self.field,
            "penalty": self.penalty,
            "env": self.env,
        }


@dataclass(frozen=True)
class BranchInfo:
    """`branch N [cross] [keep RULE] [by SCORER]` resolved: N alternatives of one event from one pre-action
    state (`cross`: N samples of each agent's part, each joint combination an alternative); `keep` None:
    every alternative continues (a tree); else one is kept by the rule and the others end."""

    count: int
    keep: str | None  # a rule of `srpo_dsl.lang.checks.branches.KEEP_RULES`, or None (a tree)
    scorer: str | None  # a reward function's name or the reference of a Python function; None: unscored
    field: str | None = None  # the task field a reward-function scorer compares with
    code: CodeRef | None = None  # a Python scorer, called as a reward: (answer, row[, episode])
    cross: tuple[str, ...] = ()  # `branch N cross`: the agents whose N samples each are crossed; (): none

    @property
    def joints(self) -> int:
        """The alternatives of the step: N, or N^agents crossed (every joint combination)."""
        return self.count ** len(self.cross) if self.cross else self.count

    def attrs(self) -> dict[str, object]:
        return {
            "count": self.count,
            "keep": self.keep,
            "scorer": self.scorer,
            "field": self.field,
            "cross": list(self.cross),
            "joints": self.joints,
        }


@dataclass(frozen=True)
class Binding:
    """A task or tool declaration: its kind (`math`, `bm25`, ..., `python`) and its validated options."""

    kind: str
    options: Mapping[str, Any]  # as the kind's option model dumps them, and what a `python` one passes on
    code: CodeRef | None = None  # the function of a `python` binding

    def attrs(self) -> dict[str, object]:
        ref = {"ref": self.code.text} if self.code else {}
        return {"kind": self.kind, **ref, "options": dict(self.options)}


@dataclass(frozen=True)
class ToolInfo(Binding):
    """A tool (`tool NAME = KIND(...)`): its binding and the JSON schema a chat template is given for it
    (`lang.usercode.toolschema`; left out of `attrs`, as the graph's other derived texts are)."""

    schema: str = ""


@dataclass(frozen=True)
class EnvInfo(Binding):
    """An environment (`env NAME = "file.py:function"(...) emits ...`): its binding, the words its steps
    return (`emits verdict(W, ...)`; none: it returns `done` as a bool) and the pools whose replicas it
    selects (`emits route(POOL)`: `parallel POOL by NAME` acts on its last step's selection)."""

    words: tuple[str, ...] = ()
    selects: tuple[str, ...] = ()

    def attrs(self) -> dict[str, object]:
        return {**super().attrs(), "words": list(self.words), "selects": list(self.selects)}


ENV_DONE, ENV_RUNNING = (
    "done",
    "running",
)  # an environment's recorded state after a step (what conditions test)
