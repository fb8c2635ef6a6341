"""Named entries: the one mechanism behind every registry of the package, and the registries whose
entries live in heavy modules, declared where nothing heavy is imported.

An entry is an object, or the import path `"package.module:attribute"` of one: a registry read by
code that must stay light (`srpo-dsl validate` imports no torch) holds its built-in entries by
path, and a lookup imports the entry's module the first time. Names are known without importing
anything. A plugin adds an entry with the registry's `register` decorator, in its own module:

    registry              entry                                     added by
    OBJECTIVES            Objective (rl/objective/losses.py)        register_policy_loss (there)
    AGGREGATIONS          Aggregation (rl/objective/aggregation.py) register_aggregation (there)
    ADVANTAGE_ESTIMATORS  (AdvantageInputs, eps) -> [N] Tensor      register_advantage_estimator
                                                                    (rl/objective/advantages.py)
    SET_NORMS             c(K): [E] set sizes -> [E] factors        SET_NORMS.register
    REWARDS               (pred, task, field) -> float              register_reward (envs/rewards.py)
    BACKENDS              BackendKind: run, eval                    BACKENDS.add
    ROLLOUT_ENGINES       RolloutEngineKind: train                  ROLLOUT_ENGINES.add
    TRACKERS              TrackerKind: where a run reports          TRACKERS.add
                          (`train with (report_to = ...)`)
    CONTRACTS             ContractSpec: an output contract's        register_contract (here)
                          arguments, capabilities and parser
                          (runtime/parsers.py)

A backend or a rollout engine is a kind: its factory (an import path, loaded when the first one is
built) and what it can do, declared on the entry; an output contract declares what its outputs can
do. Code reads these capabilities, never a name, so an entry registered by a plugin is treated as its
declaration says (docs/dsl.md, "Adding a rollout engine").

The language's other kinds (task and tool kinds, policy kinds) are registries of
`srpo_dsl.lang.checks.schema`, whose entries carry their option models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal, TypeVar

from srpo_dsl.devices import DEVICE_WORDS

T = TypeVar("T")
Parse = TypeVar("Parse", bound=Callable[..., object])  # a contract's parser, registered as it is


def load(path: str) -> Any:
    """The object at `"package.module:attribute"`, its module imported."""
    module, sep, attribute = path.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"an import path is 'package.module:attribute', got {path!r}")
    return getattr(import_module(module), attribute)


@dataclass(frozen=True)
class _ByPath:
    """An entry not imported yet."""

    path: str


class Registry(MutableMapping[str, T]):
    """`what`'s entries by name, in registration order (built-ins first).

    `builtins` maps names to import paths, imported at the first lookup of each. Reading the
    names (`in`, iteration, `len`) imports nothing; `lookup` of an unknown name is a ValueError
    that lists the known ones. `add` and `register` refuse a name twice; item assignment
    replaces an entry on purpose (a test standing in for a built-in).
    """

    def __init__(self, what: str, builtins: Mapping[str, str] | None = None):
        self.what = what
        self._entries: dict[str, T | _ByPath] = {n: _ByPath(p) for n, p in (builtins or {}).items()}

    def __getitem__(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, _ByPath):
            entry = self._entries[name] = load(entry.path)
        return entry

    def __setitem__(self, name: str, entry: T) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def add(self, name: str, entry: T) -> None:
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._entries[name] = entry

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that registers what it decorates as `name`."""

        def register(entry: T) -> T:
            self.add(name, entry)
            return entry

        return register

    def lookup(self, name: str) -> T:
        if name not in self._entries:
            raise ValueError(f"unknown {self.what} {name!r}; known: {', '.join(self)}")
        return self[name]


OBJECTIVES: Registry[Any] = Registry(
    "objective",
    {
        "srpo": "srpo_dsl.rl.objective.losses:SRPO",
        "grpo": "srpo_dsl.rl.objective.losses:GRPO",
        "seq": "srpo_dsl.rl.objective.losses:SEQ",
        "drmas": "srpo_dsl.rl.objective.losses:DRMAS",
        "traj": "srpo_dsl.rl.objective.losses:TRAJ",
    },
)
AGGREGATIONS: Registry[Any] = Registry(
    "aggregation",
    {
        "event-mean": "srpo_dsl.rl.objective.aggregation:EVENT_MEAN",
        "token-mean": "srpo_dsl.rl.objective.aggregation:TOKEN_MEAN",
        "row-mean": "srpo_dsl.rl.objective.aggregation:ROW_MEAN",
        "episode-mean": "srpo_dsl.rl.objective.aggregation:EPISODE_MEAN",
    },
)
ADVANTAGE_ESTIMATORS: Registry[Any] = Registry(
    "advantage estimator",
    {
        "event": "srpo_dsl.rl.objective.advantages:per_event",
        "row": "srpo_dsl.rl.objective.advantages:per_row",
        "agent": "srpo_dsl.rl.objective.advantages:per_agent",
        "episode": "srpo_dsl.rl.objective.advantages:per_episode",
        "state": "srpo_dsl.rl.objective.advantages:per_state",
    },
)
SET_NORMS: Registry[Any] = Registry(
    "set norm",
    {
        "sqrt": "torch:rsqrt",  # c(K) = K^-1/2
        "mean": "torch:reciprocal",  # c(K) = 1/K
        "none": "torch:ones_like",  # c(K) = 1
    },
)
REWARDS: Registry[Any] = Registry(
    "reward function",
    {
        "math_equiv": "srpo_dsl.envs.rewards:math_reward",
        "exact_match": "srpo_dsl.envs.rewards:exact_match_reward",
        "f1": "srpo_dsl.envs.rewards:f1_reward",
    },
)


@dataclass(frozen=True)
class FactoryEntry:
    """An entry that makes things: `factory` is the callable or its import path `"package.module:attribute"`,
    imported at the first `make`; the entry's other fields are read without importing anything."""

    factory: str | Callable[..., Any]

    def make(self, *args: Any, **kwargs: Any) -> Any:
        factory = load(self.factory) if isinstance(self.factory, str) else self.factory
        return factory(*args, **kwargs)


@dataclass(frozen=True)
class BackendKind(FactoryEntry):
    """A backend `run` and `eval` generate with: `factory(model, **options) -> Backend`
    (`srpo_dsl.backends.base.Backend`), `model` a local path or repo id (if `replays_script`: a reply
    script)."""

    options: tuple[str, ...] = ()  # the call's options it is given, of `device` and `decode` (others: none)
    replays_script: bool = False  # its models are reply-script files: required, checked to exist, not
    # resolved as model specs; each policy's tokenizer comes from the model the workflow names (if local)


BACKENDS: Registry[BackendKind] = Registry("backend")
BACKENDS.add("hf", BackendKind("srpo_dsl.backends:open_hf", options=("device", "decode")))
BACKENDS.add("scripted", BackendKind("srpo_dsl.backends:open_scripted", replays_script=True))
BACKENDS.add("vllm", BackendKind("srpo_dsl.backends:open_vllm"))


@dataclass(frozen=True)
class RolloutEngineKind(FactoryEntry):
    """A rollout engine `train` generates with: `factory(module, tokenizer, path, dist, decode)`
    returns a `srpo_dsl.backends.base.RolloutEngine`; called once per policy (once per shared base for
    adapters)."""

    generates_with_module: bool = True  # with the trainer's torch module (`module`): frozen policies live
    # on the device, ZeRO-3 gives it a full copy (the fit check counts both); False: `module` is None, it
    # loads `path` itself and frozen policies stay on the CPU
    serves_adapters: bool = False  # adapter(...) policies on a shared base: `module` is the peft model with
    # every adapter, each request naming its own (`GenRequest.adapter`); else such a workflow is refused
    devices: tuple[str, ...] = ("cpu", "cuda")  # the devices it runs on (`srpo_dsl.devices.DEVICES`)
    needs_package: str | None = None  # a module it imports, looked for before anything loads
    install: str = ""  # how to install `needs_package`: the end of the error line when it is missing
    reserves_gpu_share: bool = False  # keeps its own share of each GPU (`SRPO_DSL_VLLM_MEMORY`, default
    # 0.3: `rl.engines.fit.vllm_memory_share`), which the fit check leaves out of the training memory

    def __post_init__(self) -> None:
        if self.serves_adapters and not self.generates_with_module:
            raise ValueError(
                "a rollout engine serves adapters with the trainer's module: generates_with_module"
            )


ROLLOUT_ENGINES: Registry[RolloutEngineKind] = Registry("rollout engine")
ROLLOUT_ENGINES.add("hf", RolloutEngineKind("srpo_dsl.rl.engines.policies:hf_engine", serves_adapters=True))
ROLLOUT_ENGINES.add(
    "vllm",
    RolloutEngineKind(
        "srpo_dsl.rl.engines.policies:vllm_engine",
        generates_with_module=False,
        devices=("cuda",),
        needs_package="vllm",
        install="pip install 'srpo-dsl[vllm]'",
        reserves_gpu_share=True,
    ),
)


@dataclass(frozen=True)
class TrackerKind(FactoryEntry):
    """An experiment tracker a training run reports to (`train with (report_to = NAME)`):
    `factory(run: srpo_dsl.trackers.base.TrackedRun) -> srpo_dsl.trackers.base.Tracker`, called on rank 0
    when the run starts (docs/training.md, "Trackers")."""

    needs_package: str | None = None  # a module it imports, looked for before it starts
    install: str = ""  # how to install `needs_package`: the end of the warning when it is missing


TRACKERS: Registry[TrackerKind] = Registry("tracker")
TRACKERS.add("tensorboard", TrackerKind("srpo_dsl.trackers.tensorboard:TensorBoard", "tensorboard"))
TRACKERS.add("wandb", TrackerKind("srpo_dsl.trackers.wandb:Wandb", "wandb", "pip install 'srpo-dsl[wandb]'"))
TRACKERS.add(
    "mlflow", TrackerKind("srpo_dsl.trackers.mlflow:MLflow", "mlflow", "pip install 'srpo-dsl[mlflow]'")
)


def rollout_engine_problem(name: str, device: str) -> str | None:
    """Why the rollout engine `name` cannot be built on `device` (one line), or None: an unknown name, a
    device it does not run on, a package it needs that is not installed."""
    import importlib.util

    if name not in ROLLOUT_ENGINES:
        return f"--backend {name}: train rolls out with {' or '.join(ROLLOUT_ENGINES)}"
    kind = ROLLOUT_ENGINES[name]
    if device not in kind.devices:
        there = " or ".join(n for n, k in ROLLOUT_ENGINES.items() if device in k.devices)
        needs = " or ".join(DEVICE_WORDS.get(d, d) for d in kind.devices)
        return f"--backend {name} needs {needs} (use --backend {there} on {device.upper()})"
    if kind.needs_package is not None and importlib.util.find_spec(kind.needs_package) is None:
        return f"--backend {name} needs the optional extra: {kind.install}"
    return None


ContractArgs = Literal["none", "pool", "words", "tag", "actions"]


@dataclass(frozen=True)
class ContractSpec:
    """An output contract: what its arguments are (`pool` for route, `words` for verdict), its parser,
    and what its outputs can do.

    `parse(text, *args) -> Parsed` (srpo_dsl.runtime.parsers), or its import path: it receives the
    text, then by `args`: nothing, the pool size, the tuple of words, the tag's name, or the tuple of
    actions. A contract with `actions` *acts*: its parsed value is `{"action": KIND, "value": ...}`, the
    agent's recorded state is the action taken, conditions test it and a tool serves the members whose
    action is the tool's name.

    The checker reads these capabilities, never a contract's name:
    - `always_valid`: the parser accepts every text (`text`), so `retries` never resamples (W006);
    - `testable`: its value is one of its listed words, which conditions test once a step records it
      (`verdict`; E060), and which an environment's `emits` declares as the words its steps return;
    - `multi_call`: an acting contract whose one output may take several tool actions, up to the agent's
      `calls` (`act`; E074); the executor then reads the output with `parse_act_calls`.
    """

    args: ContractArgs
    describe: str
    parse: str | Callable[..., Any]
    always_valid: bool = False
    testable: bool = False
    multi_call: bool = False

    def __post_init__(self) -> None:
        if self.testable and self.args != "words":
            raise ValueError("a testable contract lists its words: args='words'")
        if self.multi_call and not self.acts:
            raise ValueError("a multi_call contract acts: args='actions'")

    @property
    def acts(self) -> bool:
        return self.args == "actions"

    @property
    def selects(self) -> bool:
        """Its value selects replicas of the pool its argument names (`route`; `KIND P by R` acts on it)."""
        return self.args == "pool"

    @property
    def parser(self) -> Callable[..., Any]:
        return load(self.parse) if isinstance(self.parse, str) else self.parse


PARSERS = "srpo_dsl.runtime.parsers"
CONTRACTS: Registry[ContractSpec] = Registry("output contract")
CONTRACTS.add(
    "route",
    ContractSpec(
        "pool", "`<route>1,3</route>` or `<route>STOP</route>` over a pool", f"{PARSERS}:parse_route"
    ),
)
CONTRACTS.add(
    "verdict",
    ContractSpec(
        "words",
        "exactly one `<verify>WORD</verify>` with an allowed word",
        f"{PARSERS}:parse_verdict",
        testable=True,
    ),
)
CONTRACTS.add("boxed", ContractSpec("none", "an answer in `\\boxed{...}`", f"{PARSERS}:parse_boxed"))
CONTRACTS.add(
    "final_boxed", ContractSpec("none", "one `FINAL: \\boxed{...}`", f"{PARSERS}:parse_final_boxed")
)
CONTRACTS.add(
    "search",
    ContractSpec(
        "none", "`<think>...</think>` and exactly one `<search>query</search>`", f"{PARSERS}:parse_search"
    ),
)
CONTRACTS.add(
    "answer",
    ContractSpec(
        "none", "`<think>...</think>` and exactly one `<answer>...</answer>`", f"{PARSERS}:parse_answer"
    ),
)
CONTRACTS.add(
    "tag",
    ContractSpec(
        "tag", "exactly one `<NAME>...</NAME>` outside thinking (NAME as declared)", f"{PARSERS}:parse_tag"
    ),
)
CONTRACTS.add("text", ContractSpec("none", "free text", f"{PARSERS}:parse_text", always_valid=True))
CONTRACTS.add(
    "act",
    ContractSpec(
        "actions",
        "exactly one `<ACTION>...</ACTION>` outside thinking, ACTION one of those declared (the last ends)",
        f"{PARSERS}:parse_act",
        multi_call=True,
    ),
)


def register_contract(
    name: str,
    *,
    args: ContractArgs = "none",
    describe: str,
    always_valid: bool = False,
    testable: bool = False,
    multi_call: bool = False,
) -> Callable[[Parse], Parse]:
    """A decorator: its function `(text, *args) -> Parsed` parses the output contract `name`, whose
    capabilities are `ContractSpec`'s."""

    def register(parse: Parse) -> Parse:
        CONTRACTS.add(name, ContractSpec(args, describe, parse, always_valid, testable, multi_call))
        return parse

    return register
