"""The executor: runs many episodes of a compiled event graph at once.

Every round, each unfinished episode advances to its next event (or tool) node; the
executor then renders the prompts of every member of every pending event, sends them to
the backends in one batch per policy, calls each tool node once for all its queries, commits
the outputs and follows the graph's guards. Members of one event are rendered from the
same pre-action state and are committed together, so none sees another's output.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from srpo_dsl.backends.base import Backend, GenRequest, GenResult
from srpo_dsl.choices import FINISH
from srpo_dsl.envs.retrieval import Document, Retriever, RetrieverError
from srpo_dsl.lang.checks.branches import KEEP_RULES
from srpo_dsl.lang.checks.declarations import AgentInfo, RewardInfo
from srpo_dsl.lang.checks.schema import TrainOptions
from srpo_dsl.lang.compile.graph import EnvNode, EventGraph, EventNode, ToolNode, attribute_key
from srpo_dsl.limits import bounded
from srpo_dsl.registries import CONTRACTS, REWARDS
from srpo_dsl.runtime import crossing
from srpo_dsl.runtime.actions import allowed, asked, final_answer, finish_state
from srpo_dsl.runtime.branching import (
    BranchScorer,
    alternative_mark,
    close,
    keep_seed,
    pruned_return,
    share,
)
from srpo_dsl.runtime.conversations import (
    chat_encoders,
    conversation_prefix,
    turn_prompt,
    use_chat_templates,
)
from srpo_dsl.runtime.credit import rounds_taken, summed_returns
from srpo_dsl.runtime.effects import EFFECTS
from srpo_dsl.runtime.environments import load_envs
from srpo_dsl.runtime.episode import EnvProgress, Episode, Event, Fork, Member, Tree
from srpo_dsl.runtime.hooks import Credited, UserParser, UserReward, UserTool
from srpo_dsl.runtime.parsers import Parsed, parse_act_calls, parse_output
from srpo_dsl.runtime.prompts import PromptRenderer
from srpo_dsl.runtime.resample import Sampled, Slot, sample
from srpo_dsl.runtime.toolcalls import parse_native
from srpo_dsl.runtime.turns import note_turn, tokens_left
from srpo_dsl.seeds import seed_of


class Executor:
    """Runs a compiled workflow with one backend per policy and one retriever or Python tool per tool.

    The workflow's Python (reward, parsers, environments) is imported here, once per process: building an
    executor is running the workflow."""

    def __init__(
        self,
        graph: EventGraph,
        backends: Mapping[str, Backend],
        renderer: PromptRenderer,
        tools: Mapping[str, Retriever | UserTool] | None = None,
        options: TrainOptions | None = None,
    ):
        """`options`: the run's resolved `train with` options (default: the workflow's), of which the
        executor reads how a branching episode's returns back up its tree (`backup`, `discount`)."""
        missing = set(graph.policies) - set(backends)
        if missing:
            raise ValueError(f"no backend for policies: {', '.join(sorted(missing))}")
        if graph.reward is None:
            raise ValueError(f"workflow `{graph.name}` declares no reward")
        unknown = sorted({e for v in graph.event_nodes for e in v.step.effects} - set(EFFECTS))
        if unknown:
            raise ValueError(
                f"no handler for the step effect(s) {', '.join(unknown)}: register one on "
                "`srpo_dsl.runtime.effects.EFFECTS`"
            )
        self.graph = graph
        self.seed = 0  # the run's seed (`run`)
        self.backends = backends
        self.renderer = renderer
        self.tools = tools or {}
        self.reward = graph.reward
        code = graph.reward.code
        self.reward_fn = (
            REWARDS.lookup(graph.reward.fn) if code is None and graph.reward.env is None else None
        )
        pools = {name: a.replicas for name, a in graph.agents.items()}
        self.user_reward = _user_reward(graph.reward, pools)
        self.parsers = {
            n: UserParser(a.parser, n, a.actions) for n, a in graph.agents.items() if a.parser is not None
        }
        self.envs = load_envs(graph.envs, pools)
        scored = [v for v in graph.event_nodes if v.branch and v.branch.scorer]
        self.scorers = {v.id: BranchScorer(v, self._agent_of) for v in scored}
        options = options or graph.train
        self.backup, self.discount = options.backup, options.discount
        self.branching = True
        # policies sharing one backend (adapters on a base) are generated for in one call, each
        # request through its own adapter; the call is named after the first of them
        first = {id(b): name for name, b in reversed(list(backends.items()))}
        self.call_of = {name: first[id(b)] for name, b in backends.items()}
        use_chat_templates(graph.policies, backends)  # a policy's own `chat_template`, before any render
        self.chats = chat_encoders(graph.agents, backends)  # the policies of conversation agents

    # ---- public -------------------------------------------------------------
    def run(
        self,
        tasks: Sequence[dict[str, object]],
        samples: int = 1,
        seed: int = 0,
        on_done: Callable[[Episode], None] | None = None,
        branching: bool = True,
    ) -> list[Episode]:
        """`samples` episodes per task (the group G); results in task-major order. Every draw has a seed
        of its own: `seed_of(seed_of(seed, round), prompt id, sample, member)` (on a branching episode's
        other paths and alternatives, the path and the alternative too). `branching=False` samples every
        `branch` step once (held-out evaluation: a scorer may read the reference answer)."""
        self.branching = branching
        episodes = [Episode(f"{t['id']}/{s}", str(t["id"]), s, t) for t in tasks for s in range(samples)]
        self.seed = seed  # the `shuffle` filter's orders follow from it (`srpo_dsl.runtime.prompts`)
        for ep in episodes:
            ep.tree = Tree(ep, [ep])
        rnd = 0
        while True:
            paths = [p for ep in episodes if ep.tree for p in ep.tree.paths if not p.done]
            for path in paths:
                self._advance(path, on_done)
            active = [p for p in paths if not p.done]
            if not active:
                return episodes
            self._round(active, seed_of(seed, rnd))
            rnd += 1

    # ---- control flow -------------------------------------------------------
    def _follow(self, ep: Episode) -> None:
        """Take the one way out whose conjunction holds; apply its loop effects."""
        for edge in self.graph.out_edges[ep.node]:
            for way in edge.ways:
                if way.holds(ep.state, ep.loops):
                    for loop in way.reset:
                        ep.loops[loop] = 1
                    for loop in way.increment:
                        ep.loops[loop] = ep.loops.get(loop, 1) + 1
                    ep.node = edge.target
                    return
        raise RuntimeError(f"no edge out of {ep.node} holds in state {ep.state}")  # the compiler prevents it

    def _advance(self, ep: Episode, on_done: Callable[[Episode], None] | None) -> None:
        """Move past nodes that need no generation (start, a routed step nobody was routed to)."""
        while not ep.done:
            node = self.graph.nodes[ep.node]
            if node.kind == "end":
                self._finish(ep)
                tree = ep.tree
                assert tree is not None
                if tree.done:
                    close(tree, self.backup, self.discount)
                    if on_done:
                        on_done(tree.root)
            elif node.kind == "start" or (isinstance(node, EventNode) and not self._acting(ep, node)):
                self._follow(ep)
            else:
                return

    def _replicas(self, ep: Episode, node: EventNode) -> tuple[int, ...]:
        routed = node.routed_by
        if not routed:
            return node.replicas
        if routed in self.graph.envs:  # `by ENV`: the replicas its last step selected
            progress = ep.envs.get(routed)
            return progress.log[-1].selected[node.agent.name] if progress and progress.log else ()
        route = ep.state.get(routed)
        return route if isinstance(route, tuple) else ()  # an invalid route selects nobody

    def _acting(self, ep: Episode, node: EventNode) -> list[tuple[AgentInfo, int]]:
        """(agent, replica) of the members of `ep`'s event at `node`: the chosen replicas that still take
        turns (`runtime.turns`: not stopped, budget left)."""
        chosen = self._replicas(ep, node)
        return [
            (a, r)
            for a, r in node.slots
            if (a is not node.agent or r in chosen) and tokens_left(ep, a, r) > 0
        ]

    # ---- one round ------------------------------------------------------------
    def _round(self, active: list[Episode], seed: int) -> None:
        slots: list[Slot] = []  # every member request of every pending event
        tool_calls: dict[str, list[Episode]] = defaultdict(list)  # tool node -> its episodes
        tool_nodes: dict[str, ToolNode] = {}
        states: dict[str, str] = {}
        for ep in active:
            node = self.graph.nodes[ep.node]
            if isinstance(node, ToolNode):
                tool_calls[node.id].append(ep)
                tool_nodes[node.id] = node
                continue
            if isinstance(node, EnvNode):  # no generation: each episode's own step, now
                self.envs[node.env].step(ep, node, self._agents_of)
                continue
            assert isinstance(node, EventNode)  # `_advance` stops an episode at no other node
            states[ep.event_prefix] = ep.state_id()
            slots += self._requests(ep, node, seed)  # a mixed set: each member to its policy's call
        results: dict[str, list[Sampled]] = defaultdict(list)
        for item in sample(slots, self._generate, self._member):  # in slot order: alternative, member
            results[item.slot.episode.event_prefix].append(item)
        for node_id, calls in tool_calls.items():
            self._call_tool(tool_nodes[node_id], calls)
        for ep in active:
            going = [ep]
            if ep.event_prefix in states:
                going = self._commit(ep, results[ep.event_prefix], states[ep.event_prefix], seed)
            for path in going:
                self._follow(path)

    def _requests(self, ep: Episode, node: EventNode, seed: int) -> list[Slot]:
        """One request per member of `ep`'s pending event, all rendered from the same state, each with
        its own seed (from the round's `seed`) and the tokens its replica has left."""
        loop = node.where.loop
        turn, max_turns = (ep.loops.get(loop, 1), self.graph.loops[loop]) if loop else (1, 1)
        alternatives = node.branch.count if node.branch and self.branching else 1
        order = seed_of(self.seed, ep.event_prefix, ep.step + 1)  # one `shuffle` order per event
        out: list[Slot] = []
        for i, (a, replica) in enumerate(self._acting(ep, node)):
            ctx = ep.context(
                role=a.name,
                replica=replica,
                pool_size=a.replicas,
                turn=turn,
                max_turns=max_turns,
                actions=node.actions,
            )
            prompt, ids = turn_prompt(ep, a, replica, ctx, self.renderer, self.chats, order)  # one for all
            adapter = self.graph.adapters.get(a.policy)
            max_tokens = tokens_left(ep, a, replica)
            for b in range(alternatives):
                draw = (
                    seed_of(seed, ep.prompt_id, ep.sample, i)
                    if alternatives == 1 and not ep.path
                    else seed_of(seed, ep.prompt_id, ep.sample, ep.path, b, i)
                )
                request = GenRequest(
                    prompt,
                    max_tokens,
                    a.temperature,
                    a.top_p,
                    a.name,
                    adapter=adapter,
                    seed=draw,
                    prompt_ids=ids,
                    prefix=conversation_prefix(ep, a, replica),
                    **(a.sampling() | {"min_tokens": min(a.min_tokens, max_tokens)}),
                )
                out.append(Slot(ep, i, a, replica, request, b))
        out.sort(key=lambda slot: slot.alternative)  # each alternative's members together, in member order
        return out

    def _generate(self, slots: Sequence[Slot]) -> list[GenResult | None]:
        """The slots' results in their order, from one call per backend (policies sharing a base share it);
        None where a short reply left a member missing."""
        calls: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(slots):
            calls[self.call_of[s.agent.policy]].append(i)
        out: list[GenResult | None] = [None] * len(slots)
        for call, index in sorted(calls.items()):
            for i, r in zip(index, self.backends[call].generate([slots[i].request for i in index])):
                out[i] = r
        return out

    def _queries(self, ep: Episode, node: ToolNode) -> list[tuple[int, str]]:
        """(replica, query) of the members of `node.on`'s last event the tool serves: every valid one, or
        for an acting agent those whose action is the tool's name."""
        members = ep.last_output.get(node.on, [])
        if self.graph.agents[node.on].actions:
            return asked(members, node.tool)
        return [
            (m.replica, m.parsed if isinstance(m.parsed, str) else json.dumps(m.parsed))
            for m in members
            if m.valid
        ]

    def _call_tool(self, node: ToolNode, episodes: list[Episode]) -> None:
        """One batched call for every query of every episode at this tool node."""
        queries = [self._queries(ep, node) for ep in episodes]
        flat = [q for qs in queries for _, q in qs]
        tool = self.tools[node.tool]
        if isinstance(tool, UserTool):
            results = iter(tool.call(flat) if flat else [])
            for ep, qs in zip(episodes, queries):
                self._observe(ep, node, [(r, next(results).observation(node.tool)) for r, _ in qs])
            return
        try:
            docs = iter(tool.search(flat, node.top_k or 1) if flat else [])
        except RetrieverError as exc:  # the run stops: the caller keeps the episodes already done
            raise RetrieverError(f"tool `{node.tool}`: {exc}") from None
        for ep, qs in zip(episodes, queries):
            found = [(r, q, next(docs)) for r, q in qs]
            ep.documents.extend(_remembered(d) for _, _, ds in found for d in ds)
            self._observe(ep, node, [(r, _documents(node.tool, q, ds)) for r, q, ds in found])

    def _observe(
        self, ep: Episode, node: ToolNode, observations: list[tuple[int, dict[str, object]]]
    ) -> None:
        """Count the calls, record them on the queried event and in the history (for the replica that
        asked); a Python tool's also join the memory."""
        ep.tool_calls += len(observations)
        ep.tool_errors += sum("error" in o for _, o in observations)
        if node.top_k is None:
            ep.observations.extend(o for _, o in observations)
        for replica, o in observations:
            ep.observe(replica, o)
        last = next((e for e in reversed(ep.events) if node.on in self._agents_of(e)), None)
        if last is not None:
            last.observations.extend(o for _, o in observations)

    def _agents_of(self, event: Event) -> tuple[str, ...]:
        return tuple(a.name for a in self._event_node(event.node).agents)

    def _event_node(self, node_id: str) -> EventNode:
        """The event node `node_id`: where an event was made, or an episode's pending event is."""
        node = self.graph.nodes[node_id]
        assert isinstance(node, EventNode), node_id
        return node

    def _agent_of(self, event: Event) -> str:
        """Who acted, as a reward's episode view names it: the agent, or `a+b` for a mixed set (a crossed
        sample: its own agent)."""
        if event.branch is not None and event.branch.agent is not None:
            return event.branch.agent
        return "+".join(self._agents_of(event))

    def _commit(self, ep: Episode, sampled: list[Sampled], state_id: str, seed: int) -> list[Episode]:
        """Record the pending event of `ep` (each alternative of a branching step); the paths that go on."""
        node = self._event_node(ep.node)
        if node.branch is None or not self.branching:
            self._apply(ep, node, self._event(ep, node, sampled, state_id, ""))
            return [ep]
        if node.branch.cross:
            return self._cross(ep, node, sampled, state_id, seed)
        alternatives = [[s for s in sampled if s.slot.alternative == b] for b in range(node.branch.count)]
        events = [self._event(ep, node, alt, state_id, f"b{b}") for b, alt in enumerate(alternatives)]
        scorer = self.scorers.get(node.id)
        scores: list[float | None] = scorer.scores(ep, events) if scorer else [None] * len(events)
        if node.branch.keep is None:
            return self._fork(ep, node, events, scores)
        valid = [e.complete and all(m.valid for m in e.members) for e in events]
        kept = KEEP_RULES[node.branch.keep](scores, valid, keep_seed(seed, ep))
        marks = [alternative_mark(ep, node.branch, i, i == kept, scores[i]) for i in range(len(events))]
        for e, mark, score in zip(events, marks, scores):
            e.branch, e.tree_return = mark, pruned_return([*e.members, *e.tries], score, self.reward.penalty)
            if mark.kept:
                self._apply(ep, node, e)
            else:
                _tree(ep).events.append(e)
        return [ep]

    def _fork(
        self, ep: Episode, node: EventNode, events: list[Event], scores: list[float | None]
    ) -> list[Episode]:
        """A tree branch: `ep` ends here, and each alternative goes on as a child path of its own."""
        assert node.branch is not None and ep.tree is not None
        children = [ep.fork(i) for i in range(len(events))]
        for i, (child, e) in enumerate(zip(children, events)):
            e.branch = alternative_mark(ep, node.branch, i, True, scores[i])
            e.path = child.path
            self._apply(child, node, e)
        ep.tree.forks[ep.path] = Fork(ep, children, [[e] for e in events], scores)
        ep.tree.paths.extend(children)
        ep.done = True
        return children

    def _cross(
        self, ep: Episode, node: EventNode, sampled: list[Sampled], state_id: str, seed: int
    ) -> list[Episode]:
        """A `branch N cross` step (`runtime.crossing`): each agent's N samples are events of their own,
        every joint of one sample per agent an alternative: all go on as child paths (a tree), or the
        joint the keep rule picks goes on and the others end, each sample returning its joints' mean."""
        branch, tree = node.branch, ep.tree
        assert branch is not None and tree is not None
        samples = {agent: self._samples(ep, node, sampled, state_id, agent) for agent in branch.cross}
        tree.events += [e for events in samples.values() for e in events]
        joints = crossing.combinations(branch)
        taken = crossing.taken_by(samples, joints)
        scorer = self.scorers.get(node.id)
        scores = [scorer.score(ep, crossing.members_of(t)) if scorer else None for t in taken]
        group = alternative_mark(ep, branch, 0, True, None).group
        if branch.keep is None:
            children = [ep.fork(j) for j in range(len(joints))]
            for child, events in zip(children, taken):
                self._take(child, node, events)
            crossing.mark_samples(group, samples, joints, scores, [True] * len(joints))
            records = crossing.joint_records(group, joints, [c.path for c in children], scores)
            tree.forks[ep.path] = Fork(ep, children, taken, scores, records)
            tree.joints += records
            tree.paths.extend(children)
            ep.done = True
            return children
        valid = [crossing.complete_and_valid(t) for t in taken]
        kept = KEEP_RULES[branch.keep](scores, valid, keep_seed(seed, ep))
        penalty = self.reward.penalty
        returns = [
            pruned_return([m for e in t for m in (*e.members, *e.tries)], s, penalty)
            for t, s in zip(taken, scores)
        ]
        share(taken, returns)
        crossing.mark_samples(group, samples, joints, scores, [j == kept for j in range(len(joints))])
        paths = [ep.path if j == kept else None for j in range(len(joints))]
        tree.joints += crossing.joint_records(group, joints, paths, scores, returns)
        self._take(ep, node, taken[kept])
        return [ep]

    def _samples(
        self, ep: Episode, node: EventNode, sampled: list[Sampled], state_id: str, agent: str
    ) -> list[Event]:
        """A crossed agent's N samples, each an event of its own members (`EVENT b{index}-{agent}`)."""
        own = [s for s in sampled if s.slot.agent.name == agent]
        first = min(s.slot.member_index for s in own)
        count = node.branch.count if node.branch else 1
        alternatives = [[s for s in own if s.slot.alternative == b] for b in range(count)]
        return [
            crossing.renumber(self._event(ep, node, alt, state_id, f"b{b}-{agent}"), first)
            for b, alt in enumerate(alternatives)
        ]

    def _event(
        self, ep: Episode, node: EventNode, sampled: list[Sampled], state_id: str, suffix: str
    ) -> Event:
        """The event its members make (and the invalid tries resampled for them), numbered as `ep`'s next;
        `suffix`: an alternative's `b{index}`, a crossed sample's `b{index}-{agent}`."""
        members = [s.member for s in sampled if s.member is not None]
        event_id = f"{ep.event_prefix}/e{ep.step + 1}{suffix}"
        complete = len(members) == len(sampled)
        event = Event(event_id, node.event_type, node.id, state_id, len(sampled), complete, members)
        event.actions = list(node.actions)
        event.tries = [t for s in sampled for t in s.tries]
        event.parent = ep.events[-1].event_id if ep.events else None
        event.path = ep.path
        event.state_key = ep.state_key()
        return event

    def _apply(self, ep: Episode, node: EventNode, event: Event) -> None:
        """Record `event` in the rollout's tree and commit it on `ep` (`_take`)."""
        _tree(ep).events.append(event)
        self._take(ep, node, [event])

    def _take(self, ep: Episode, node: EventNode, events: list[Event]) -> None:
        """Commit `events` (one event, or the samples of a crossed joint) on `ep` as its next step: record
        them on its path, make their outputs visible to later roles, note each agent's turn, then apply
        the step's effects (`srpo_dsl.runtime.effects`)."""
        members = [m for e in events for m in e.members]
        tries = [t for e in events for t in e.tries]
        ep.step += 1
        ep.events.extend(events)
        ep.invalid_actions += sum(not m.valid for m in [*members, *tries])
        ep.commit_outputs(members)
        for agent in node.agents:  # each agent's own members: its last output, its action
            own = [m for m in members if m.role == agent.name]
            ep.last_output[agent.name] = own
            ep.state[attribute_key(agent.name, FINISH)] = finish_state(own)
            note_turn(ep, agent, own, [t for t in tries if t.role == agent.name])
        for effect in node.step.effects:
            EFFECTS[effect](ep, node, members)

    def _parse(self, a: AgentInfo, actions: tuple[str, ...], text: str, finish: str) -> Parsed:
        if a.parser is not None:
            return allowed(self.parsers[a.name](text, finish), actions)
        selects = CONTRACTS[a.contract].selects  # replicas of the pool its first argument names
        pool = self.graph.agents[a.contract_args[0]].replicas if selects else None
        if a.tool_format is not None and a.actions:  # the model's native tool calls, the final action's tag
            return allowed(parse_native(text, a.actions, a.tool_format, a.calls), actions)
        if a.calls > 1:  # a `multi_call` contract (else E074): up to `calls` tool actions in one output
            return allowed(parse_act_calls(text, a.actions, a.calls), actions)
        return allowed(parse_output(a.contract, text, pool_size=pool, args=a.contract_args), actions)

    def _member(self, slot: Slot, r: GenResult) -> Member:
        a = slot.agent
        node = self._event_node(slot.episode.node)
        parsed = self._parse(a, node.actions if a is node.agent else a.actions, r.text, r.finish_reason)
        return Member(
            member_index=slot.member_index,
            role=a.name,
            replica=slot.replica,
            policy=a.policy,
            policy_version=self.backends[a.policy].version,
            prompt_token_ids=list(r.prompt_token_ids),
            response_token_ids=list(r.response_token_ids),
            behavior_logprobs=list(r.logprobs),
            text=r.text,
            valid=parsed.valid,
            parsed=_plain(parsed.value),
            finish=r.finish_reason,
            stop_string=r.stop_string,
        )

    def _finish(self, ep: Episode) -> None:
        """Team return: the reward of the rewarded agent's last output (or of the rewarded environment's
        steps) plus the invalid-action penalty (per member too, when a Python reward keyed its returns)."""
        ep.answer = self._answer(ep)
        reward, credit = self._score(ep)
        penalty = self.reward.penalty * ep.invalid_actions
        keyed = {key: value + penalty for key, value in credit.items()}
        ep.record_returns(reward, reward + penalty, keyed)
        ep.done = True

    def _answer(self, ep: Episode) -> object:
        """The rewarded agent's last valid parsed output (an acting agent's: its final action's value);
        None for an environment's reward."""
        if self.reward.agent is None:
            return None
        agent = self.graph.agents[self.reward.agent]
        members = ep.last_output.get(agent.name)
        last = members[-1] if members else None
        if agent.actions:
            return final_answer(agent, last)
        return last.parsed if last is not None and last.valid else None

    def _score(self, ep: Episode) -> Credited:
        if self.reward.env is not None:  # `reward ENV`: the rewards it returned in this episode
            progress = ep.envs.get(self.reward.env, EnvProgress())
            steps = [(r.reward, r.credit) for r in progress.log]
            return progress.reward, summed_returns(steps, ep.events)
        pred = ep.answer
        if self.user_reward is None:
            assert self.reward_fn is not None and self.reward.field is not None
            score = self.reward_fn(pred if pred is None else str(pred), ep.task, self.reward.field)
            return float(score), {}
        view = ep.view(self._agent_of) if self.user_reward.wants_episode else None
        return self.user_reward(pred, dict(ep.task), view, rounds_taken(ep.events))


def _user_reward(reward: RewardInfo, pools: Mapping[str, int]) -> UserReward | None:
    """The workflow's Python reward, imported (None: its reward is a built-in or an environment's)."""
    if reward.code is None:
        return None
    assert reward.agent is not None  # the checker's: a Python reward rewards an agent
    return UserReward(reward.code, reward.agent, pools)


def _tree(ep: Episode) -> Tree:
    """The rollout's tree of paths `ep` belongs to (`run` gives every episode one)."""
    assert ep.tree is not None
    return ep.tree


def _remembered(doc: Document) -> str:
    """A retrieved document as the memory's `documents` hold it: `title: text` (its text bounded)."""
    text = str(bounded("text", doc.text)["text"])
    return f"{doc.title}: {text}" if doc.title else text


def _documents(tool: str, query: str, docs: list[Document]) -> dict[str, object]:
    return {
        "tool": tool,
        "query": query,
        "documents": [{"id": d.id, "title": d.title, **bounded("text", d.text)} for d in docs],
    }


def _plain(value: object) -> object:
    """Parsed values as JSON-friendly data (tuples become lists)."""
    return list(value) if isinstance(value, tuple) else value
