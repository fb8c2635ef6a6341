"""The executor: runs many episodes of a compiled event graph at once.

Every round, each unfinished episode advances to its next event (or tool) node; the
executor then renders the prompts of every member of every pending event, sends them to
the backends in one batch per policy, calls each tool once for all its queries, commits
the outputs and follows the graph's guards. Members of one event are rendered from the
same pre-action state and are committed together, so none sees another's output.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import networkx as nx

from srpo_dsl.backends.base import Backend, GenRequest, GenResult
from srpo_dsl.envs.retrieval import Retriever
from srpo_dsl.envs.rewards import REWARDS
from srpo_dsl.runtime.episode import Episode, Event, Member
from srpo_dsl.runtime.parsers import parse_output
from srpo_dsl.runtime.prompts import PromptRenderer

EVENT_KINDS = ("route", "parallel", "verify", "revise", "aggregate")
INVALID = "INVALID"  # the recorded state of a verdict or route that broke its contract


@dataclass(frozen=True)
class _Slot:
    """One member request waiting for its generation."""

    episode: Episode
    node: str
    member_index: int
    replica: int
    request: GenRequest


class Executor:
    """Runs a compiled workflow with one backend per policy and one retriever per tool."""

    def __init__(
        self,
        graph: nx.DiGraph,
        backends: dict[str, Backend],
        renderer: PromptRenderer,
        tools: dict[str, Retriever] | None = None,
    ):
        missing = set(graph.graph["policies"]) - set(backends)
        if missing:
            raise ValueError(f"no backend for policies: {', '.join(sorted(missing))}")
        self.g = graph
        self.backends = backends
        self.renderer = renderer
        self.tools = tools or {}
        self.reward = graph.graph["reward"]
        self.reward_fn = REWARDS[self.reward["fn"]]
        self.loops: dict[str, int] = graph.graph["loops"]

    # ---- public -------------------------------------------------------------
    def run(
        self,
        tasks: Sequence[dict],
        samples: int = 1,
        seed: int = 0,
        on_done: Callable[[Episode], None] | None = None,
    ) -> list[Episode]:
        """`samples` episodes per task (the group G); results in task-major order."""
        episodes = [Episode(f"{t['id']}/{s}", str(t["id"]), s, t) for t in tasks for s in range(samples)]
        rnd = 0
        while True:
            for ep in episodes:
                if not ep.done:
                    self._advance(ep, on_done)
            active = [ep for ep in episodes if not ep.done]
            if not active:
                return episodes
            self._round(active, seed * 1_000_003 + rnd)
            rnd += 1

    # ---- control flow -------------------------------------------------------
    def _holds(self, ep: Episode, atom: dict) -> bool:
        if "loop" in atom:
            it = ep.loops.get(atom["loop"], 1)
            return it < atom["value"] if atom["op"] == "<" else it >= atom["value"]
        same = ep.state.get(atom["var"]) == atom["value"]
        return same if atom["op"] == "==" else not same

    def _follow(self, ep: Episode) -> None:
        """Take the one way out whose conjunction holds; apply its loop effects."""
        for _, target, data in self.g.out_edges(ep.node, data=True):
            for conj, effects in zip(data["guard"], data["effects"]):
                if all(self._holds(ep, a) for a in conj):
                    for loop in effects["reset"]:
                        ep.loops[loop] = 1
                    for loop in effects["increment"]:
                        ep.loops[loop] = ep.loops.get(loop, 1) + 1
                    ep.node = target
                    return
        raise RuntimeError(f"no edge out of {ep.node} holds in state {ep.state}")  # the compiler prevents it

    def _advance(self, ep: Episode, on_done: Callable[[Episode], None] | None) -> None:
        """Move past nodes that need no generation (start, a routed step nobody was routed to)."""
        while not ep.done:
            data = self.g.nodes[ep.node]
            if data["kind"] == "end":
                self._finish(ep)
                if on_done:
                    on_done(ep)
            elif data["kind"] == "start" or (data["kind"] == "parallel" and not self._replicas(ep, data)):
                self._follow(ep)
            else:
                return

    def _replicas(self, ep: Episode, data: dict) -> list[int]:
        if data.get("routed_by"):
            route = ep.state.get(data["routed_by"])
            return list(route) if isinstance(route, tuple) else []  # an invalid route selects nobody
        return list(data["replicas"])

    # ---- one round ------------------------------------------------------------
    def _round(self, active: list[Episode], seed: int) -> None:
        slots: dict[str, list[_Slot]] = defaultdict(list)
        tool_calls: dict[str, list[tuple[Episode, list[str]]]] = defaultdict(list)
        states: dict[str, str] = {}
        for ep in active:
            data = self.g.nodes[ep.node]
            if data["kind"] == "tool":
                queries = [m.parsed for m in ep.last_output.get(data["on"], []) if m.valid]
                tool_calls[data["tool"]].append((ep, queries))
                continue
            states[ep.episode_id] = ep.state_id()
            loop = data.get("loop")
            turn, max_turns = (ep.loops.get(loop, 1), self.loops[loop]) if loop else (1, 1)
            for i, replica in enumerate(self._replicas(ep, data)):
                ctx = ep.context(
                    role=data["agent"],
                    replica=replica,
                    pool_size=data["pool_size"],
                    turn=turn,
                    max_turns=max_turns,
                )
                prompt = self.renderer.render(data["template"], ctx)
                req = GenRequest(
                    prompt, data["max_tokens"], data["temperature"], data["top_p"], data["agent"]
                )
                slots[data["policy"][0]].append(_Slot(ep, ep.node, i, replica, req))
        results: dict[tuple[str, int], GenResult | None] = {}
        for k, (policy, batch) in enumerate(sorted(slots.items())):
            out = self.backends[policy].generate([s.request for s in batch], seed=seed + k)
            for s, r in zip(batch, out):
                results[(s.episode.episode_id, s.member_index)] = r
        for tool, calls in tool_calls.items():
            self._call_tool(tool, calls)
        by_episode: dict[str, list[_Slot]] = defaultdict(list)
        for batch in slots.values():
            for s in batch:
                by_episode[s.episode.episode_id].append(s)
        for ep in active:
            if self.g.nodes[ep.node]["kind"] != "tool":
                self._commit(
                    ep,
                    sorted(by_episode[ep.episode_id], key=lambda s: s.member_index),
                    results,
                    states[ep.episode_id],
                )
            self._follow(ep)

    def _call_tool(self, tool: str, calls: list[tuple[Episode, list[str]]]) -> None:
        """One batched search for every query of every episode at this tool node."""
        data = next(d for _, d in self.g.nodes(data=True) if d.get("tool") == tool)
        flat = [q for _, qs in calls for q in qs]
        docs = self.tools[tool].search(flat, data["top_k"]) if flat else []
        i = 0
        for ep, queries in calls:
            last = next((e for e in reversed(ep.events) if self.g.nodes[e.node]["agent"] == data["on"]), None)
            for q in queries:
                found = docs[i]
                i += 1
                ep.tool_calls += 1
                ep.documents.extend(d.text if not d.title else f"{d.title}: {d.text}" for d in found)
                if last is not None:
                    last.observations.append(
                        {
                            "tool": tool,
                            "query": q,
                            "documents": [{"id": d.id, "title": d.title, "text": d.text} for d in found],
                        }
                    )

    def _commit(self, ep: Episode, slots: list[_Slot], results: dict, state_id: str) -> None:
        """Parse every member, record the event, then make its outputs visible to later roles."""
        data = self.g.nodes[ep.node]
        agent = self.g.graph["agents"][data["agent"]]
        words = tuple(agent["contract_args"]) if agent["contract"] == "verdict" else ()
        pool = (
            self.g.graph["agents"][agent["contract_args"][0]]["replicas"]
            if agent["contract"] == "route"
            else None
        )
        backend = self.backends[data["policy"][0]]
        members: list[Member] = []
        for s in slots:
            r = results.get((ep.episode_id, s.member_index))
            if r is None:
                continue  # a missing member: the event is recorded incomplete
            parsed = parse_output(agent["contract"], r.text, pool_size=pool, words=words)
            members.append(
                Member(
                    s.member_index,
                    data["agent"],
                    s.replica,
                    data["policy"][0],
                    backend.version,
                    list(r.prompt_token_ids),
                    list(r.response_token_ids),
                    list(r.logprobs),
                    r.text,
                    parsed.valid,
                    _plain(parsed.value),
                )
            )
        ep.step += 1
        event = Event(
            f"{ep.episode_id}/e{ep.step}",
            data["event_type"],
            ep.node,
            state_id,
            len(slots),
            len(members) == len(slots),
            members,
        )
        ep.events.append(event)
        ep.invalid_actions += sum(not m.valid for m in members)
        ep.last_output[data["agent"]] = members
        for m in members:
            ep.team_context.append(
                {"role": m.role, "replica": m.replica, "text": m.text, "valid": m.valid, "value": m.parsed}
            )
        if data["kind"] == "verify":
            ep.feedback.extend(m.text for m in members)
        if data["kind"] in ("verify", "route"):
            m = members[0] if members else None
            ep.state[data["agent"]] = (
                (tuple(m.parsed) if isinstance(m.parsed, list) else m.parsed)
                if m is not None and m.valid
                else INVALID
            )

    def _finish(self, ep: Episode) -> None:
        """Team return: the reward of the rewarded agent's last output plus the invalid-action penalty."""
        last = ep.last_output.get(self.reward["agent"], [])
        pred = last[-1].parsed if last and last[-1].valid else None
        ep.answer = pred
        ep.score = float(self.reward_fn(pred if pred is None else str(pred), ep.task, self.reward["field"]))
        ep.reward = ep.score + self.reward["penalty"] * ep.invalid_actions
        ep.done = True


def _plain(value: object) -> object:
    """Parsed values as JSON-friendly data (tuples become lists)."""
    return list(value) if isinstance(value, tuple) else value
