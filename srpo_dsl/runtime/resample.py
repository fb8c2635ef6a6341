"""Resampling outputs that break their contract (an agent's `retries = N`, AutoGen's selector retries).

After a round's generation, every invalid output of an agent with retries left is sampled again from the
same prompt (a seed of its own per attempt), all of them, of every member of every episode, in one
generation call per backend; then the outputs still invalid, and so on, at most N passes. The output
kept is the member the episode continues with (its event's active set is unchanged: K members); the
invalid ones it replaced are the event's `tries`, recorded and trained as invalid actions. A retry is
generated within the replica's token `budget` (`runtime.turns`); with nothing left it is not drawn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from srpo_dsl.backends.base import GenRequest, GenResult
from srpo_dsl.lang.checks.declarations import AgentInfo
from srpo_dsl.runtime.episode import Episode, Member
from srpo_dsl.runtime.turns import tokens_left
from srpo_dsl.seeds import seed_of


@dataclass(frozen=True)
class Slot:
    """One member request waiting for its generation."""

    episode: Episode
    member_index: int
    agent: AgentInfo
    replica: int
    request: GenRequest
    alternative: int = 0  # which alternative of a branching step it belongs to (`runtime.branching`)


@dataclass
class Sampled:
    """A slot's output: the member kept (None: the backend returned nothing, the event is incomplete) and
    the invalid tries it replaced, in order."""

    slot: Slot
    member: Member | None
    tries: list[Member] = field(default_factory=list)

    def retry(self) -> Slot | None:
        """The request of its next try, if its output is invalid and a retry and tokens are left."""
        m, a = self.member, self.slot.agent
        if m is None or m.valid or len(self.tries) >= a.retries:
            return None
        drawn = sum(len(t.response_token_ids) for t in [*self.tries, m])
        left = tokens_left(self.slot.episode, a, self.slot.replica, pending=drawn)
        if left == 0:
            return None
        r = self.slot.request
        again = dataclasses.replace(
            r,
            max_tokens=left,
            min_tokens=min(r.min_tokens, left),
            seed=seed_of(r.seed, "retry", len(self.tries) + 1),
        )
        return dataclasses.replace(self.slot, request=again)


Generate = Callable[[Sequence[Slot]], list[GenResult | None]]


def sample(
    slots: Sequence[Slot], generate: Generate, member: Callable[[Slot, GenResult], Member]
) -> list[Sampled]:
    """Every slot's output after its retries; `generate` batches a list of slots (one call per backend)."""
    out = [Sampled(s, None if r is None else member(s, r)) for s, r in zip(slots, generate(slots))]
    while due := [(s, slot) for s in out if (slot := s.retry()) is not None]:
        for (s, slot), r in zip(due, generate([slot for _, slot in due])):
            assert s.member is not None
            s.tries.append(s.member)
            s.member = None if r is None else member(slot, r)
    return out
