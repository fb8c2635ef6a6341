"""The uses of the user's Python in a rollout: a reward, a branch scorer, an output parser, a task loader,
a tool (the training objective and advantage estimator are the trainer's: `srpo_dsl.rl.objective.plugins`).

Each wraps a `UserFunction` (imported once, time-limited, failures naming the user's
file:line) and checks what it returns, so a wrong return is one clear error too:

- reward `(answer, row[, episode]) -> float | {key: float}`: finite numbers only, keys naming members
  (`ROLE`, `ROLE#REPLICA`, `ROLE@ROUND`, `ROLE#REPLICA@ROUND`: `runtime.credit`);
- branch scorer `(answer, row[, episode]) -> float`: a finite number;
- parser `(text) -> (valid, value)`: a bool and plain JSON data;
- loader `(split, **options) -> [row, ...]`: a non-empty list of dicts;
- tool `(queries, **options) -> [str, ...]`: one string per query. A tool call that fails,
  times out or returns the wrong thing is *not* an error: each of its queries gets an error
  observation, and the executor counts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from srpo_dsl.lang.usercode.pycode import TOOL_OPTIONS, CodeRef
from srpo_dsl.limits import bounded, oversized_row
from srpo_dsl.runtime.credit import CreditError, parse_credit
from srpo_dsl.runtime.parsers import Parsed
from srpo_dsl.runtime.usercode import (
    UserCodeError,
    UserFunction,
    finite_number,
    json_value,
    load_function,
    seconds_option,
    shorten,
)

# A reward, checked: the rewarded agent's reward, and the rewards it keyed by member and round (canonical
# credit keys, `runtime.credit`; empty: every member gets the reward). `Episode.record_returns` takes it in.
Credited = tuple[float, dict[str, float]]


class OnAnswer:
    """A user function called on an answer and its task row, and on the episode when it takes a third
    parameter (the arity the checker allows: `pycode.Use.arity`)."""

    def __init__(self, ref: CodeRef):
        self.fn = load_function(ref)

    @property
    def wants_episode(self) -> bool:
        return self.fn.arity == 3

    def called(self, answer: object, row: Mapping[str, object], episode: object) -> tuple[object, str]:
        """What the function returned, and where (`on answer ..., task ...`) for an error."""
        args = (answer, row, episode) if self.wants_episode else (answer, row)
        about = f"answer {shorten(answer)}, task {shorten(row.get('id'))}"
        return self.fn(*args, about=lambda: about), f"on {about}"


class UserScorer(OnAnswer):
    """A Python branch scorer: `(answer, row[, episode]) -> float`, one finite number per alternative."""

    def __call__(self, answer: object, row: Mapping[str, object], episode: object = None) -> float:
        value, where = self.called(answer, row, episode)
        if not finite_number(value):
            raise self.fn.fail(f"returned {shorten(value)} {where}: a branch scorer returns a finite number")
        return float(value)


class UserReward(OnAnswer):
    """A Python reward; `pools`: each declared role -> its number of replicas."""

    def __init__(self, ref: CodeRef, rewarded: str, pools: Mapping[str, int]):
        super().__init__(ref)
        self.rewarded, self.pools = rewarded, dict(pools)

    def __call__(
        self,
        answer: object,
        row: Mapping[str, object],
        episode: object = None,
        rounds: Mapping[str, int] | None = None,
    ) -> Credited:
        """`rounds`: each role -> the rounds it took in the episode (what `ROLE@N` keys may name)."""
        value, where = self.called(answer, row, episode)
        if isinstance(value, Mapping):
            return self._credit(value, where, rounds or {})
        if not finite_number(value):
            raise self.fn.fail(
                f"returned {shorten(value)} {where}: a reward is a finite number (or {{role: number}})"
            )
        return float(value), {}

    def _credit(self, value: Mapping[object, object], where: str, rounds: Mapping[str, int]) -> Credited:
        try:
            credit = parse_credit(value, self.pools, rounds)
        except CreditError as err:
            raise self.fn.fail(f"returned {err.what} {where}: {err.why}") from None
        if self.rewarded not in credit:
            raise self.fn.fail(f"returned no score for the rewarded agent `{self.rewarded}` {where}")
        return credit[self.rewarded], credit


class UserParser:
    """A Python output parser; one that declares actions returns `(True, {"action": A, "value": v})`."""

    def __init__(self, ref: CodeRef, agent: str, actions: tuple[str, ...] = ()):
        self.fn = load_function(ref)
        self.agent, self.actions = agent, actions

    def __call__(self, text: str, finish: str | None = None) -> Parsed:
        """`finish`: how the turn ended (`choices.FINISH_REASONS`), passed to a parser that takes it."""
        args = (text, finish) if self.fn.arity == 2 else (text,)
        value = self.fn(*args, about=lambda: f"the output of `{self.agent}` {shorten(text)}")
        if not (isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], bool)):
            raise self.fn.fail(
                f"returned {shorten(value)} on the output of `{self.agent}` {shorten(text)}: "
                "a parser returns (valid: bool, value)"
            )
        valid, parsed = value
        if not valid:
            return Parsed(False, None, str(parsed) if parsed is not None else "rejected by the parser")
        if not json_value(parsed):
            raise self.fn.fail(
                f"returned the value {shorten(parsed)} on {shorten(text)}: "
                "a parsed value is JSON data (str, number, bool, None, list, dict)"
            )
        if self.actions and not (isinstance(parsed, dict) and parsed.get("action") in self.actions):
            raise self.fn.fail(
                f"returned the value {shorten(parsed)} on {shorten(text)}: `{self.agent}` acts, so a valid "
                f'value is {{"action": A, "value": ...}} with A one of {", ".join(self.actions)}'
            )
        return Parsed(True, list(parsed) if isinstance(parsed, tuple) else parsed)


def load_rows(ref: CodeRef, split: str, options: Mapping[str, object]) -> list[dict[str, object]]:
    """The loader's rows of `split`; each gets an `id` (`SPLIT-N`) if it has none; ids made unique."""
    fn = load_function(ref, options=tuple(options))
    rows = fn(split=split, **options, about=lambda: f"split {split!r}")
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise fn.fail(f"returned {shorten(rows)} for split {split!r}: a loader returns a list of dict rows")
    listed = list(rows)
    if not listed:
        raise fn.fail(f"returned no rows for split {split!r}")
    out: list[dict[str, object]] = []
    seen: set[str] = set()
    for i, row in enumerate(listed):
        if not isinstance(row, dict):
            raise fn.fail(f"row {i} of split {split!r} is {shorten(row)}: every row is a dict")
        problem = oversized_row(row)
        if problem:
            raise fn.fail(f"row {i} of split {split!r}: {problem}")
        rid = str(row.get("id", f"{split}-{i}"))
        rid = f"{rid}@{i}" if rid in seen else rid
        seen.add(rid)
        out.append({**row, "id": rid})
    return out


@dataclass(frozen=True)
class ToolResult:
    query: str
    result: str | None
    error: str | None  # why the call gave no result (raised, timed out, a wrong return)

    def observation(self, tool: str) -> dict[str, object]:
        if self.error is not None:
            return {"tool": tool, "query": self.query, "error": self.error}
        return {"tool": tool, "query": self.query, **bounded("result", self.result or "")}


class UserTool:
    """A Python tool: batches of queries, `timeout` seconds per call, `batch` queries per call."""

    def __init__(self, ref: CodeRef, options: Mapping[str, object]):
        self.passed = {k: v for k, v in options.items() if k not in TOOL_OPTIONS}
        batch = options.get("batch")  # the checker's: an int >= 1, or None
        self.batch = batch if isinstance(batch, int) else None
        self.fn: UserFunction = load_function(ref, seconds_option(options), tuple(self.passed))

    def call(self, queries: list[str]) -> list[ToolResult]:
        size = self.batch or max(len(queries), 1)
        return [r for i in range(0, len(queries), size) for r in self._chunk(queries[i : i + size])]

    def _chunk(self, queries: list[str]) -> list[ToolResult]:
        try:
            out = self.fn(
                list(queries),
                **self.passed,
                about=lambda: f"{len(queries)} queries, the first {shorten(queries[0])}",
            )
        except UserCodeError as err:
            return [ToolResult(q, None, str(err)) for q in queries]
        if isinstance(out, (str, bytes)) or not isinstance(out, Sequence) or len(out) != len(queries):
            n = len(out) if isinstance(out, Sequence) and not isinstance(out, (str, bytes)) else shorten(out)
            error = f"{self.fn.ref.function}() returned {n} observations for {len(queries)} queries"
            return [ToolResult(q, None, error) for q in queries]
        return [
            ToolResult(q, o, None)
            if isinstance(o, str)
            else ToolResult(q, None, f"observation {shorten(o)} is not a str")
            for q, o in zip(queries, out)
        ]
