"""Checked program -> event graph (`EventGraph`, frozen types), with static cost bounds and a stable hash.

Control flow is compiled as a *frontier*: the ways that leave the steps compiled so far and wait
for the next node (a branch adds its condition to them, a `break` or a router's STOP sends them to
the loop's exit). A loop's head is not a node: the ways into the loop, and the ways back from the
end of its body, are each chained with the ways from the head to the body's first nodes. So the
graph holds only the node kinds of the contract.

An edge is taken along one of its *ways* (`graph.Way`): a conjunction of atoms that must all hold,
and the loop effects of taking it: `reset` (the loop is entered: iteration 1), then `increment`
(next iteration). An atom is an agent's last verdict or route (`verifier == approve`) or a loop's
1-based iteration (`L1 < 4`). Two ways between the same two nodes may change different counters
(a nested loop's own round, or a round of the loop around it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from srpo_dsl.lang.checks.branches import MAX_PATHS
from srpo_dsl.lang.checks.check_context import Checked
from srpo_dsl.lang.checks.declarations import AgentInfo
from srpo_dsl.lang.compile.graph import (
    Atom,
    Bounds,
    Edge,
    EnvNode,
    EventGraph,
    EventNode,
    Node,
    Terminal,
    ToolNode,
    Way,
    Where,
    attribute_key,
)
from srpo_dsl.lang.syntax import nodes as n
from srpo_dsl.lang.syntax.messages import Diagnostic, Span, SrpoError
from srpo_dsl.lang.syntax.steps import STEP_KINDS, members

Conj = tuple[Atom, ...]  # all must hold; () always holds


_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[A-Za-z0-9_.+-]+|[^\sA-Za-z0-9_.+-]')


def program_hash(program: n.Program) -> str:
    """Stable across runs, comments and whitespace: a digest of the program's token stream."""
    tokens = [t for t in _TOKENS.findall(program.source) if not t.startswith("#")]
    return hashlib.sha256("\x00".join(tokens).encode()).hexdigest()[:16]


def _contradicts(conj: Conj) -> bool:
    for a in conj:
        for b in conj:
            if a is b or a.name != b.name or a.kind != b.kind:
                continue
            if a.kind == "var" and (
                (a.op == "==" and b.op == "==" and a.value != b.value)
                or (a.value == b.value and a.op != b.op)
            ):
                return True
            if a.kind == "loop" and a.value == b.value and a.op != b.op:
                return True
    return False


def _conj_and(c1: Conj, c2: Conj) -> Conj | None:
    """Both conjunctions, or None when they cannot hold together (each alone can)."""
    if not c1 or not c2:
        return c1 or c2
    conj = c1 + tuple(a for a in c2 if a not in c1)
    if _contradicts(conj):
        return None
    fixed = {a.name for a in conj if a.kind == "var" and a.op == "=="}  # `x == a` implies `x != b`
    return tuple(a for a in conj if not (a.kind == "var" and a.op == "!=" and a.name in fixed))


def _chain(p1: Way, p2: Way) -> Way | None:
    """`p1`, then `p2` (through a loop's head); None when both cannot hold."""
    changed = p1.reset + p1.increment
    if changed and any(a.kind == "loop" and a.name in changed for a in p2.conj):
        raise AssertionError("a guard would read a loop counter its edge just changed")  # the checker's E055
    conj = _conj_and(p1.conj, p2.conj)
    return None if conj is None else Way(conj, p1.reset + p2.reset, p1.increment + p2.increment)


def _add_path(paths: list[Way], p: Way) -> None:
    """Add a way along an edge: ways with the same effects merge by `or` (`always` absorbs the others)."""
    same = [q for q in paths if (q.reset, q.increment) == (p.reset, p.increment)]
    if p in same or any(not q.conj for q in same):
        return
    if not p.conj:
        paths[:] = [q for q in paths if q not in same]
    elif any(q.conj == p.conj for q in paths):
        raise AssertionError("one condition with two different loop effects")
    paths.append(p)


@dataclass
class BoundCost:
    events: int = 0
    calls: int = 0
    tool_calls: int = 0
    tokens: int = 0

    def __iadd__(self, o: BoundCost) -> BoundCost:
        self.events += o.events
        self.calls += o.calls
        self.tool_calls += o.tool_calls
        self.tokens += o.tokens
        return self

    def __mul__(self, k: int) -> BoundCost:
        return BoundCost(self.events * k, self.calls * k, self.tool_calls * k, self.tokens * k)

    def max(self, o: BoundCost) -> BoundCost:
        return BoundCost(
            max(self.events, o.events),
            max(self.calls, o.calls),
            max(self.tool_calls, o.tool_calls),
            max(self.tokens, o.tokens),
        )


_ALWAYS = [Way(())]
_ALWAYS_WAYS = (Way(()),)
Pending = tuple[str, Way]  # a way from a node (or a loop's head: its id) still waiting for its target
Frontier = list[Pending]


def _atom(cond: n.Cond) -> Atom:
    """The atom a written condition tests, with its own operator (`verifier != approve`)."""
    name = cond.agent.name if cond.field is None else attribute_key(cond.agent.name, cond.field.name)
    return Atom("var", name, "==" if cond.op == "==" else "!=", cond.word.name)  # the grammar's two


def _restrict(frontier: Frontier, atom: Atom) -> Frontier:
    """The ways on which `atom` also holds."""
    out = []
    for u, p in frontier:
        conj = _conj_and(p.conj, (atom,))
        if conj is not None:
            out.append((u, Way(conj, p.reset, p.increment)))
    return out


Bound = tuple[BoundCost, int]  # the most a step costs, and the most paths it splits an episode into


class _Bounds(n.StepVisitor[[], Bound]):
    """The most an episode can cost: each loop at its bound, each branch at its dearer arm, and everything
    after a tree branch once per alternative (the paths multiply; counted up to `MAX_PATHS` + 1).

    Steps that run only on one decision of an agent's turn exclude each other: `if A == x { ... }` (no
    `else`) and `call T on A` for an acting A (it serves the members whose action is T). A turn takes one
    decision, and each member one action, so of the steps after one turn of A (until A acts again) only
    those on one decision run: they cost the dearest decision's steps, not all of them."""

    def __init__(self, agents: Mapping[str, AgentInfo]):
        self.agents = agents

    def block(self, steps: tuple[n.Step, ...]) -> Bound:
        total, paths = BoundCost(), 1
        turns: dict[str, dict[str, BoundCost]] = {}  # agent -> decision of its last turn -> the steps on it
        for s in steps:
            cost, split = self.visit(s)
            cost = cost * paths
            paths = min(paths * split, MAX_PATHS + 1)  # a decision's split counts whichever it is: a bound
            on = self.decision_of(s)
            if on is None:
                total += cost
            else:
                ways = turns.setdefault(on[0], {})
                ways[on[1]] = ways.get(on[1], BoundCost())
                ways[on[1]] += cost
            for agent in {a.name for e in n.walk_events((s,)) for a in e.agents}:  # a new turn of `agent`
                total += _dearest(turns.pop(agent, {}))
        for decisions in turns.values():
            total += _dearest(decisions)
        return total, paths

    def decision_of(self, s: n.Step) -> tuple[str, str] | None:
        """(agent, decision) when `s` runs only on that decision of the agent's last turn."""
        if isinstance(s, n.If) and s.cond.op == "==" and not s.orelse and s.cond.agent.name in self.agents:
            return s.cond.agent.name, s.cond.word.name
        if isinstance(s, n.CallTool) and self.agents[s.agent.name].actions:
            return s.agent.name, s.tool.name
        return None

    def visit_event(self, s: n.EventStep) -> Bound:
        a = self.agents[s.agent.name]
        k = members(s, a.replicas).cardinality[1]
        others = [self.agents[o.name] for o in s.others]
        once = BoundCost(1, k + sum(o.replicas for o in others), 0)
        once.tokens = k * _turn_tokens(a) + sum(o.replicas * _turn_tokens(o) for o in others)
        if s.branch is None:
            return once, 1
        joints = s.branch.count ** len(s.agents) if s.branch.cross else s.branch.count
        cost = once * s.branch.count  # every member samples N times (crossed: N of each agent's part)
        if s.branch.cross:  # an event per sample of each agent
            cost.events = s.branch.count * len(s.agents)
        return cost, 1 if s.branch.keep else joints

    def visit_call(self, s: n.CallTool) -> Bound:
        agent = self.agents[s.agent.name]
        return BoundCost(tool_calls=agent.replicas * agent.calls), 1  # each output may make `calls` calls

    def visit_env(self, s: n.EnvStep) -> Bound:
        return BoundCost(), 1  # an environment step generates nothing and calls no tool

    def visit_repeat(self, s: n.Repeat) -> Bound:
        body, split = self.block(s.body)
        total, paths = BoundCost(), 1
        for _ in range(s.bound or 0):  # round i runs on every path the earlier rounds made
            total += body * paths
            paths = min(paths * split, MAX_PATHS + 1)
        return total, paths

    def visit_if(self, s: n.If) -> Bound:
        (then, p1), (orelse, p2) = self.block(s.then), self.block(s.orelse)
        return then.max(orelse), max(p1, p2)

    def visit_break(self, s: n.Break) -> Bound:
        return BoundCost(), 1


def _turn_tokens(a: AgentInfo) -> int:
    """The most one replica's turn generates: its output and each retry of it."""
    return a.max_tokens * (1 + a.retries)


def episode_cost(steps: tuple[n.Step, ...], agents: Mapping[str, AgentInfo]) -> Bound:
    """The most an episode costs, and its paths. An agent with a token `budget` generates at most `budget`
    tokens per replica on each path, whatever its turns: the token bound is the lesser of the bound over
    all steps and the sum, per agent, of its own bound capped by its budget on every path."""
    cost, paths = _Bounds(agents).block(steps)
    if all(a.budget is None for a in agents.values()):
        return cost, paths
    per_agent = 0
    for name, a in agents.items():
        alone = {k: v if k == name else replace(v, max_tokens=0) for k, v in agents.items()}
        own = _Bounds(alone).block(steps)[0].tokens
        per_agent += own if a.budget is None else min(own, a.replicas * a.budget * paths)
    cost.tokens = min(cost.tokens, per_agent)
    return cost, paths


def _dearest(costs: Mapping[str, BoundCost]) -> BoundCost:
    """The most that one of several exclusive ways costs, in each measure."""
    out = BoundCost()
    for cost in costs.values():
        out = out.max(cost)
    return out


def step_cost(step: n.Step, agents: Mapping[str, AgentInfo]) -> BoundCost:
    """The most one execution of `step` costs: its loops at their bounds, its branches at the dearer arm."""
    return _Bounds(agents).block((step,))[0]


class _KeptBounds(_Bounds):
    """`_Bounds` that keeps each step's bound: a step inside others is visited once for all of them."""

    def __init__(self, agents: Mapping[str, AgentInfo]):
        super().__init__(agents)
        self.kept: dict[int, Bound] = {}

    def visit(self, step: n.Step) -> Bound:
        if id(step) not in self.kept:
            self.kept[id(step)] = super().visit(step)
        return self.kept[id(step)]


def step_costs(agents: Mapping[str, AgentInfo]) -> Callable[[n.Step], BoundCost]:
    """`step_cost` for the steps of one program, each step's bound worked out once (linear in the steps,
    where `step_cost` of each step of a loop walks the loop's body again)."""
    bounds = _KeptBounds(agents)
    return lambda step: bounds.block((step,))[0]


class _Compiler(n.StepVisitor[[Frontier, list[Frontier]], Frontier]):
    """Compiles each kind of step after a frontier (`visit_*(step, frontier, exits)`: the ways out)."""

    def __init__(self, checked: Checked):
        self.c = checked
        self.nodes: dict[str, Node] = {}
        self.spans: dict[str, Span] = {}  # event node -> its step's source span
        self.succ: dict[str, dict[str, list[Way]]] = {}  # u -> v -> the paths of edge u->v
        self.inside: dict[str, frozenset[str]] = {}  # node -> the loops enclosing it
        self.heads: dict[str, Frontier] = {}  # loop -> the ways from its head to the first nodes of its body
        self.count = {"n": 0, "L": 0}
        self.event_types: dict[str, int] = {}
        self.loop_names: dict[str, int] = {}
        self.open_loops: list[str] = []  # loops enclosing the node being built, innermost last
        self.enclosing: frozenset[str] = frozenset()  # the same, as a set

    # ---- control flow ----------------------------------------------------------
    def _new(self, prefix: str) -> str:
        self.count[prefix] += 1
        return f"{prefix}{self.count[prefix]}"

    def _add(self, node: Node) -> str:
        self.nodes[node.id] = node
        self.succ[node.id] = {}
        self.inside[node.id] = self.enclosing
        return node.id

    def where(self, span: Span) -> Where:
        return Where(str(span), span.line, span.col, self.open_loops[-1] if self.open_loops else None)

    def connect(self, frontier: Frontier, v: str) -> None:
        """Lead every waiting way to node `v`."""
        inside = self.inside[v]
        for u, p in frontier:
            if u in self.heads:  # from a loop's head: the loop's entry and rounds are chained with it later
                self.heads[u].append((v, p))
                continue
            # A counter only matters inside its loop; re-entry resets it. Dropping dead effects lets
            # a `break` path and a loop-exit path to the same target merge into one.
            if (p.reset or p.increment) and not set(p.reset + p.increment) <= inside:
                p = p._replace(
                    reset=tuple(x for x in p.reset if x in inside),
                    increment=tuple(x for x in p.increment if x in inside),
                )
            paths = self.succ[u].get(v)
            if paths is None:
                self.succ[u][v] = [p]
            else:
                _add_path(paths, p)

    def through(self, frontier: Frontier, loop: str, exits: Frontier) -> Frontier:
        """Lead `frontier` (into the loop, or back from the end of its body) through the loop's head to
        the body's first nodes. Return the loop's `exits`, where those that leave straight from its
        head (a `break` before any step) are chained likewise."""
        if any(u == loop for u, _ in frontier):
            raise AssertionError("a loop round without a step")  # the checker's E055
        out = [w for w in exits if w[0] != loop]
        leave = [q for u, q in exits if u == loop]
        for u, p in frontier:
            for v, q in self.heads[loop]:
                if (chained := _chain(p, q)) is not None:
                    self.connect([(u, chained)], v)
            out += [(u, chained) for q in leave if (chained := _chain(p, q)) is not None]
        return out

    def event_node(self, s: n.EventStep) -> str:
        name = "+".join(a.name for a in s.agents)
        agent = self.c.agents[s.agent.name]
        others = tuple(self.c.agents[o.name] for o in s.others)
        base = f"{s.kind}:{name}"
        seen = self.event_types[base] = self.event_types.get(base, 0) + 1
        who = members(s, agent.replicas)
        nid = self._new("n")
        self.spans[nid] = s.span
        event_type = base if seen == 1 else f"{base}#{seen}"
        by = s.by.name if s.by else None
        step = STEP_KINDS[s.kind]
        where = self.where(s.span)
        only = tuple(w.name for w in s.only or ())
        label = f"{who.label} only {', '.join(only)}" if only else who.label
        actions = only or agent.actions
        if others:  # one set of every replica of each agent
            k = len(who.replicas) + sum(o.replicas for o in others)
            who = who._replace(cardinality=(k, k))
            label = f"{s.kind} {', '.join(a.name for a in s.agents)} K={k}"
        if any(a.stop == "replica" or a.budget is not None for a in (agent, *others)):
            hi = who.cardinality[1]  # replicas that stopped take no turn
            who = who._replace(cardinality=(1, hi))
            label = label.replace(f" K={hi}", f" K=1..{hi}")
        branch = self.c.branches.get(s.branch) if s.branch else None
        if branch is not None:
            label += f" branch {branch.count}" + (" cross" if branch.cross else "")
            label += f" keep {branch.keep}" if branch.keep else ""
        return self._add(
            EventNode(
                nid,
                step,
                where,
                label,
                agent,
                event_type,
                who.replicas,
                who.cardinality,
                by,
                actions,
                others,
                branch,
            )
        )

    def block(self, steps: tuple[n.Step, ...], frontier: Frontier, exits: list[Frontier]) -> Frontier:
        """Compile `steps` after `frontier`; `exits` collects the ways out of each enclosing loop.

        A router's STOP leaves the innermost loop; outside loops it skips past the router's next routed
        step in this block (and skips nothing when there is none).
        """
        events = [s if isinstance(s, n.EventStep) else None for s in steps]
        last_routed = {e.by.name: i for i, e in enumerate(events) if e and e.by}
        stops: dict[str, Frontier] = {}  # router -> its STOP ways, waiting to skip past its routed step
        for i, (s, e) in enumerate(zip(steps, events)):
            frontier = self.visit(s, frontier, exits)
            if e is None:
                continue
            if STEP_KINDS[e.kind].routes and (exits or last_routed.get(e.agent.name, -1) > i):
                stop = Atom("var", e.agent.name, "==", "STOP")
                (exits[-1] if exits else stops.setdefault(e.agent.name, [])).extend(_restrict(frontier, stop))
                frontier = _restrict(frontier, stop.negated())
            elif e.by is not None and e.by.name in stops:
                frontier = frontier + stops.pop(e.by.name)
        return frontier

    def visit_event(self, s: n.EventStep, frontier: Frontier, exits: list[Frontier]) -> Frontier:
        v = self.event_node(s)
        self.connect(frontier, v)
        return [(v, Way(()))]

    def visit_repeat(self, s: n.Repeat, frontier: Frontier, exits: list[Frontier]) -> Frontier:
        lid = self._new("L")
        self.loop_names[lid] = s.bound or 0
        self.heads[lid] = []
        self.open_loops.append(lid)
        self.enclosing = frozenset(self.open_loops)
        out: Frontier = []
        tail = self.block(s.body, [(lid, Way(()))], [*exits, out])
        self.open_loops.pop()
        self.enclosing = frozenset(self.open_loops)
        assert s.bound is not None, "the checks refuse a loop without a bound (E050)"
        more = Atom("loop", lid, "<", s.bound)
        if s.until:
            hit = _atom(s.until)
            back = _restrict(_restrict(tail, hit.negated()), more)
            out += _restrict(tail, hit) + _restrict(tail, more.negated())
        else:
            back = _restrict(tail, more)
            out += _restrict(tail, more.negated())
        into = [(u, Way(p.conj, (*p.reset, lid), p.increment)) for u, p in frontier]
        into += [(u, Way(p.conj, p.reset, (*p.increment, lid))) for u, p in back]
        return self.through(into, lid, out)

    def visit_if(self, s: n.If, frontier: Frontier, exits: list[Frontier]) -> Frontier:
        hit = _atom(s.cond)
        return self.block(s.then, _restrict(frontier, hit), exits) + self.block(
            s.orelse, _restrict(frontier, hit.negated()), exits
        )

    def visit_break(self, s: n.Break, frontier: Frontier, exits: list[Frontier]) -> Frontier:
        hit = _atom(s.cond)
        exits[-1] += _restrict(frontier, hit)
        return _restrict(frontier, hit.negated())

    def visit_call(self, s: n.CallTool, frontier: Frontier, exits: list[Frontier]) -> Frontier:
        tool = self.c.tools[s.tool.name]
        pool = self.c.agents[s.agent.name].replicas
        top_k = tool.options.get("top_k") if tool.code is None else None
        node = ToolNode(self._new("n"), self.where(s.span), s.tool.name, tool.kind, s.agent.name, top_k, pool)
        v = self._add(node)
        self.connect(frontier, v)
        return [(v, Way(()))]

    def visit_env(self, s: n.EnvStep, frontier: Frontier, exits: list[Frontier]) -> Frontier:
        node = EnvNode(self._new("n"), self.where(s.span), s.env.name, tuple(a.name for a in s.on))
        v = self._add(node)
        self.connect(frontier, v)
        return [(v, Way(()))]

    def atom_text(self, a: Atom) -> str:
        if a.kind == "loop":
            return f"{'loop' if len(self.loop_names) == 1 else 'loop' + a.name[1:]} {a.op} {a.value}"
        return f"{a.name} {a.op} {a.value}"

    def when(self, paths: list[Way]) -> str:
        """The guard as text: `always`, `a == x`, `(a == x and loop < 3) or b != y`, ..."""
        conj = [" and ".join([self.atom_text(a) for a in p.conj]) for p in paths]
        if conj == [""]:
            return "always"
        return conj[0] if len(conj) == 1 else " or ".join([f"({c})" if " and " in c else c for c in conj])

    def edge(self, u: str, v: str, paths: list[Way]) -> Edge:
        if paths == _ALWAYS:  # most edges
            return Edge(u, v, _ALWAYS_WAYS, "always")
        return Edge(u, v, tuple(paths), self.when(paths))

    def run(self) -> EventGraph:
        p, c = self.c.program, self.c
        start = self._add(Terminal("start", "start"))
        tail = self.block(p.steps, [(start, Way(()))], [])
        self.connect(tail, self._add(Terminal("end", "end")))
        edges = tuple(self.edge(u, v, paths) for u, out in self.succ.items() for v, paths in out.items())
        bounds, paths = episode_cost(p.steps, c.agents)
        return EventGraph(
            name=p.name.name,
            source=p.file,
            hash=program_hash(p),
            bounds=Bounds(bounds.events, bounds.calls, bounds.tool_calls, bounds.tokens, paths),
            nodes=self.nodes,
            edges=edges,
            loops=self.loop_names,
            policies=c.policies,
            agents=c.agents,
            task=c.task,
            tools=c.tools,
            reward=c.reward,
            train=c.train,
            code=c.code,
            envs=c.envs,
        )


def reward_path_errors(graph: EventGraph, spans: dict[str, Span]) -> list[Diagnostic]:
    """A trainable action with no path to the rewarded agent can never be credited (E070).
    A Python reward with three arguments reads the whole episode: every action reaches it.

    `spans`: the source span of every event node."""
    if graph.reward is None or (graph.reward.code is not None and graph.reward.code.arity == 3):
        return []
    pred: dict[str, list[str]] = {v: [] for v in graph.nodes}
    for e in graph.edges:
        pred[e.target].append(e.source)
    reward = graph.reward
    reach = {  # the reward points: the rewarded agent's steps, or the rewarded environment's
        v.id
        for v in graph.nodes.values()
        if (isinstance(v, EventNode) and reward.agent in {a.name for a in v.agents})
        or (isinstance(v, EnvNode) and v.env == reward.env)
    }
    todo = list(reach)  # one backward walk from all rewarded nodes: linear, however often the agent acts
    while todo:
        for u in pred[todo.pop()]:
            if u not in reach:
                reach.add(u)
                todo.append(u)
    late = [v for v in graph.event_nodes if v.id not in reach]
    point = f"`{reward.agent or reward.env}`"
    out = []
    for v in late:
        trained = [a for a in v.agents if graph.policies[a.policy].trainable and a.trained]
        if trained:
            message, hint = _late_message(trained, point)
            out.append(Diagnostic("E070", message, spans[v.id], hint))
    return out


def _late_message(trained: list[AgentInfo], point: str) -> tuple[str, str]:
    """E070's message and hint for a step whose `trained` agents (those on a trainable policy, not
    `trained = false`) act late."""
    names = ", ".join(f"`{a.name}`" for a in trained)
    policies = list(dict.fromkeys(a.policy for a in trained))
    one = len(trained) == 1
    message = (
        f"{names} {'acts' if one else 'act'} after the last reward point: {'its' if one else 'their'} "
        f"trainable actions never reach the reward of {point}"
    )
    hint = (
        f"move the step before the last step of {point}, or put {names} on a frozen policy "
        f"({', '.join(f'`{p}`' for p in policies)} {'is' if len(policies) == 1 else 'are'} trained)"
    )
    return message, hint


def path_errors(graph: EventGraph, program: n.Program) -> list[Diagnostic]:
    """An episode whose tree branches multiply past `MAX_PATHS` paths (E058), at its first tree branch."""
    if graph.bounds.paths <= MAX_PATHS:
        return []
    first = next(s for s in n.walk_events(program.steps) if s.branch and s.branch.keep is None)
    assert first.branch is not None
    return [
        Diagnostic(
            "E058",
            f"the tree branches multiply to more than {MAX_PATHS} paths per episode: each path runs the "
            "rest of the workflow",
            first.branch.span,
            "branch fewer times, or inside fewer loop rounds; `keep best` prunes instead of multiplying",
        )
    ]


def compile_checked(checked: Checked) -> EventGraph:
    """Compile a program whose checks passed; raise `SrpoError` for graph-level errors."""
    if checked.errors:
        raise SrpoError(checked.errors)
    compiler = _Compiler(checked)
    graph = compiler.run()
    errors = path_errors(graph, checked.program) + reward_path_errors(graph, compiler.spans)
    if errors:
        raise SrpoError(errors)
    return graph
