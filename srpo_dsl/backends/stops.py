"""Stop strings (`GenRequest.stop_strings`): where a response ends when its text reaches one.

The response ends at the first occurrence, in its decoded text, of any stop string completed by a token
at response position `min_tokens` or later (positions counted from 0: at least `min_tokens` tokens come
before that token, as they come before an end-of-sequence token, which cannot be drawn before position
`min_tokens`; vLLM's `min_tokens` alike; with `min_tokens` 0 any occurrence counts). Occurrences are
taken by where they end in the text, then by where they start (the longer of two stop strings that
end together wins). The response keeps its tokens up to and including the one that completed the match
(those after it are dropped, with their log-probs), and its text ends right after the stop string: a
token that completed the match and brought more characters keeps its id, while its extra characters
are cut from the text.

The token that completed a match is the first `k` whose decoded prefix `decode(ids[:k])` begins with
the text through the match; decoding a prefix of the ids gives a prefix of the text (a character
whose bytes are split over tokens reads as a replacement character until its last byte, so the test
stays monotone in `k`), and a binary search finds it in a few decodes.

The `hf` engine generates past a stop and truncates afterwards (a row's draws depend on its own seed,
position and logits only, so its tokens up to the stop are the same); to end rows early its decode
loops ask `StopWatch.reached` at the points where they already synchronise, which decodes only the
tail generated since the last check before the exact `match`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Decode = Callable[[Sequence[int]], str]
DecodeMany = Callable[[list[list[int]]], list[str]]  # one tokenizer call for several responses


@dataclass(frozen=True)
class StopMatch:
    """Where a response ends at a stop string."""

    tokens: int  # response tokens kept: through the one that completed the match
    text: str  # the response text through the stop string
    stop: str  # the stop string matched


def occurrences(text: str, stops: Sequence[str]) -> list[tuple[int, int, str]]:
    """Every occurrence (overlapping ones too) of every non-empty stop string in `text`, as
    (end, start, stop), by end and then by start."""
    found = []
    for stop in stops:
        start = text.find(stop) if stop else -1
        while start >= 0:
            found.append((start + len(stop), start, stop))
            start = text.find(stop, start + 1)
    return sorted(found)


def completing_token(decode: Decode, ids: Sequence[int], through: str) -> int:
    """The least `k >= 1` whose decoded prefix `decode(ids[:k])` begins with `through` (`len(ids)` when
    none does before it)."""
    low, high = 1, len(ids)
    while low < high:
        middle = (low + high) // 2
        if decode(ids[:middle]).startswith(through):
            high = middle
        else:
            low = middle + 1
    return high


def match(
    decode: Decode, ids: Sequence[int], stops: Sequence[str], min_tokens: int = 0, text: str | None = None
) -> StopMatch | None:
    """Where the response `ids` ends at a stop string (see the module's docstring); None: it does not.
    `text`: `decode(ids)`, when the caller has it already."""
    if not stops or not ids:
        return None
    text = decode(ids) if text is None else text
    for end, _, stop in occurrences(text, stops):
        k = completing_token(decode, ids, text[:end])
        if k > min_tokens:  # the token at position k - 1 completed it
            return StopMatch(k, text[:end], stop)
    return None


class StopWatch:
    """A chunk of rows' stop strings and `min_tokens`, checked on the host while the rows decode."""

    def __init__(
        self,
        decode: Decode,
        decode_many: DecodeMany,
        stops: Sequence[Sequence[str]],
        min_tokens: Sequence[int],
    ):
        self.decode, self.decode_many = decode, decode_many
        self.stops = [tuple(s) for s in stops]
        self.min_tokens = list(min_tokens)
        self.margin = max((len(s) for row in self.stops for s in row), default=0) + 1  # tokens re-read

    def watches(self, row: int) -> bool:
        """Whether row `row` has stop strings."""
        return bool(self.stops[row])

    def match(self, row: int, ids: Sequence[int], text: str | None = None) -> StopMatch | None:
        """Row `row`'s exact stop in its response `ids` (`match`; `text`: their decoded text, if known)."""
        return match(self.decode, ids, self.stops[row], self.min_tokens[row], text)

    def reached(self, rows: Sequence[int], ids: Sequence[list[int]], since: int) -> list[bool]:
        """Whether each of `rows` (their responses `ids`) has reached its stop: the tails from a few tokens
        before `since` (the tokens they had at the last check) are decoded first, in one call, and the
        exact `match` runs only on a row whose tail holds a stop string. A stop a tail misses (a token
        decoding to no characters) is found by the truncation after the decode."""
        tails = self.decode_many([list(x[max(0, since - self.margin) :]) for x in ids]) if rows else []
        return [
            len(x) > self.min_tokens[r]
            and any(s and s in tail for s in self.stops[r])
            and self.match(r, x) is not None
            for r, x, tail in zip(rows, ids, tails)
        ]
