"""The `hf` engine's decode loops: one chunk of requests (equal temperature, top-p, top-k and penalties)
in, tokens and their log-probs out.

- `dynamic`: a `DynamicCache`. Each distinct prompt is prefilled once, and a row leaves the batch
  (and its cache) as soon as it ends, so no step computes a finished row. The host checks every step
  whether rows ended: cheap on CPU, a GPU synchronisation per token on CUDA.
- `static`: one step at a time over buffers of one shape for the whole chunk (`decode_step`: a
  `StaticCache`, the mask, the tokens). Rows stay in the batch after they end (their further tokens
  are discarded), and the host asks whether every row has ended only every `CHECK_EVERY` steps, so
  the GPU is never waited on within those steps. Rows and cache length are padded to powers of two
  (`bucket`), so a team's calls share a few shapes; each shape's buffers are kept for its next call
  until `release()`, before an update, the least recently used dropped first past the cap
  (`DecodeStats.cache_cap`, from the fit check). Every row is prefilled, a prompt repeated G times
  too (one forward over all rows).
- `compiled`: `static` with the whole step under `torch.compile`, one graph per shape (CUDA graphs on
  CUDA): nothing is launched per token but that graph. Prefill and the first draw run eagerly, and
  so do the steps of rows routed through several adapters (the routing is Python state that a
  compiled step would re-trace for every mix). The first call of each shape compiles (or records)
  it, counted and timed in `DecodeStats`, and its buffers stay through updates: the graph replays
  on them.
- `auto`: `compiled` on CUDA, `dynamic` elsewhere.

Every mode draws with `draw.draw` (the sampling controls, the counter noise of `sampling`) and scores
with the trainer's definition of a log-prob. A row's draw at response position t depends on its seed,
t, its logits and its own tokens so far (penalties) only, so the three loops sample alike and a row
samples alike in any batch. Rows with stop strings (`Chunk.stops`) are decoded past their stop and cut
afterwards by the engine (`stops`); the loops end them early where they check on the host anyway
(`dynamic` every `CHECK_EVERY` steps too, not every step: that would decode text per token).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache

from srpo_dsl.backends.base import PENALTIES_OFF, BackendError
from srpo_dsl.backends.decode_step import (
    DecodeBuffers,
    decode_step,
    kv_cache_bytes,
    new_buffers,
    penalty_bytes,
    record,
    vocab_size,
)
from srpo_dsl.backends.draw import DrawState, Shaping, count, draw, prompt_presence
from srpo_dsl.backends.logprobs import distinct_rows, mask_positions, pad_rows
from srpo_dsl.backends.routing import routed
from srpo_dsl.backends.stops import StopWatch
from srpo_dsl.backends.turn_cache import TurnCache, keeps_turns, seeded_cache
from srpo_dsl.choices import DECODE_MODES
from srpo_dsl.lang.compile.graph import BASE_ADAPTER

Variant = tuple[int, int, Shaping]  # a compiled step's (rows, length, flags)
CPU_COMPILE = {"cpp.simdlen": 1, "max_fusion_size": 1}  # `compiled_step` on CPU: torch 2.13's C++ kernels
CHECK_EVERY = 8  # static decode: steps between the host's checks that every row has ended
LEAST_LENGTH = 64  # static decode: the cache length is the next power of two, at least this


@dataclass(frozen=True)
class Chunk:
    """Rows decoded together: prompt ids, each row's token limit and sampling seed, the sampling
    settings (`GenRequest`'s), each row's min_tokens (None: 0), its stop strings (None: none), and
    each row's LoRA adapter when the model hosts several (None: the model as it is)."""

    prompts: list[list[int]]
    max_tokens: list[int]
    seeds: list[int]
    temperature: float
    top_p: float
    adapters: list[str | None] | None = None
    prefixes: list[int | None] | None = None  # a conversation's row: its prompt's ids kept from its turns
    top_k: int = 0
    penalties: tuple[float, float, float] = PENALTIES_OFF  # frequency, presence, repetition
    min_tokens: list[int] | None = None
    stops: StopWatch | None = None

    def shaping(self) -> Shaping:
        """The controls this chunk's draw applies."""
        least = max(self.min_tokens or [0])
        return Shaping.of(self.temperature, self.top_p, self.top_k, self.penalties, least)

    def names(self) -> list[str] | None:
        """Each row's adapter for `routed` (the base's own name for rows without one)."""
        return None if self.adapters is None else [a or BASE_ADAPTER for a in self.adapters]


def resolve_mode(mode: str, device: torch.device) -> str:
    """The decode loop `mode` runs as (`auto`: `compiled` on CUDA, else `dynamic`)."""
    if mode not in DECODE_MODES:
        raise BackendError(f"unknown decode mode `{mode}`: expected one of {', '.join(DECODE_MODES)}")
    if mode == "auto":
        return "compiled" if device.type == "cuda" else "dynamic"
    return mode


def make_decoder(mode: str, model: PreTrainedModel, pad_id: int, eos_ids: Collection[int]) -> Decoder:
    """The decoder for a resolved `mode`."""
    if mode == "dynamic":
        return Decoder(model, pad_id, eos_ids)
    return StaticDecoder(model, pad_id, eos_ids, compiled=mode == "compiled")


class Decoder:
    """The `dynamic` loop (see the module's docstring); a conversation's KV stays between its turns
    (`turn_cache`)."""

    mode = "dynamic"

    def __init__(self, model: PreTrainedModel, pad_id: int, eos_ids: Collection[int]):
        self.model = model
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        self.eos = torch.tensor(sorted(eos_ids), device=self.device)
        self.turns = TurnCache()
        self.keeps_turns = keeps_turns(DynamicCache(config=model.config))

    def release(self) -> None:
        """Drop what is kept between calls: the conversations' KV (the weights are about to change)."""
        self.turns.clear()

    def decode(self, chunk: Chunk) -> tuple[torch.Tensor, torch.Tensor]:
        """`[n, T]` sampled tokens (pad after a row's end) and their log-probs (0 there), T = max tokens."""
        names = chunk.names()
        keyed = chunk.prompts if names is None else [[*p, a] for p, a in zip(chunk.prompts, names)]
        distinct, index = distinct_rows(keyed)
        first = {k: i for i, k in reversed(list(enumerate(index)))}
        heads = [first[k] for k in range(len(distinct))]  # a request of each distinct (prompt, adapter)
        logits, cache, mask = self._prefill(chunk, heads, names)
        rows = torch.tensor(index, device=self.device)
        cache.batch_select_indices(rows)  # one cache row per request (prompts repeat within groups)
        logits, mask = logits[rows], mask[rows]
        limits = torch.tensor(chunk.max_tokens, device=self.device)
        shaping = chunk.shaping()
        state = draw_state(self.model, chunk, shaping, 0, self.pad_id)
        tokens = torch.full((len(rows), max(chunk.max_tokens)), self.pad_id, device=self.device)
        logprobs = torch.zeros(tokens.shape, device=self.device)
        active = torch.arange(len(rows), device=self.device)
        t = torch.zeros((), dtype=torch.long, device=self.device)  # the response position
        for step in range(tokens.shape[1]):
            picked, logprob = draw(logits, state, shaping, t, self.eos)
            count(state, picked)
            tokens[active, step], logprobs[active, step] = picked, logprob
            going = ~torch.isin(picked, self.eos) & (limits[active] > step + 1)
            if chunk.stops is not None and (step + 1) % CHECK_EVERY == 0:
                going &= ~stopped(chunk.stops, active.tolist(), tokens, step + 1).to(self.device)
            if chunk.prefixes is not None:  # a conversation's row that ends keeps its KV for its next turn
                self._keep(
                    chunk, cache, mask, active, (~going).nonzero().squeeze(-1).tolist(), tokens, step, names
                )
            if not going.any():
                break
            if not going.all():
                kept = going.nonzero().squeeze(-1)
                active, picked, mask, state = active[kept], picked[kept], mask[kept], state.select(kept)
                cache.batch_select_indices(kept)
                names = None if names is None else [names[k] for k in kept.tolist()]
            mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
            t = t + 1
            logits = self.forward(picked[:, None], mask, cache, names)
        return tokens, logprobs

    def _prefill(
        self, chunk: Chunk, heads: list[int], names: list[str] | None
    ) -> tuple[torch.Tensor, DynamicCache, torch.Tensor]:
        """The next-token logits of each distinct prompt (rows `heads`), its cache and attention mask; a
        conversation's turn whose last turn's KV was kept prefills only its new ids on top of it."""
        prompts = [chunk.prompts[i] for i in heads]
        adapters = None if names is None else [names[i] for i in heads]
        kept = [None] * len(heads)
        if chunk.prefixes is not None and self.keeps_turns:
            own = [None if names is None else names[i] for i in heads]
            kept = [self.turns.take(p, chunk.prefixes[i] or 0, a) for p, i, a in zip(prompts, heads, own)]
        if any(k is not None for k in kept):
            suffixes = [p[0 if k is None else k[0][0].shape[1] :] for p, k in zip(prompts, kept)]
            cache, input_ids, mask = seeded_cache(self.model.config, kept, self.pad_id, suffixes, self.device)
        else:
            (input_ids, mask), cache = self._padded(prompts), DynamicCache(config=self.model.config)
        return self.forward(input_ids, mask, cache, adapters), cache, mask

    def _keep(
        self,
        chunk: Chunk,
        cache: Cache,
        mask: torch.Tensor,
        active: torch.Tensor,
        ending: list[int],
        tokens: torch.Tensor,
        step: int,
        names: list[str] | None,
    ) -> None:
        """Keep the KV of the conversations' rows among `ending` (positions in `active`): their prompt and
        the reply tokens fed so far (`step` of them; the one drawn now never was), or those before the
        token that completed a stop string (their reply is cut after it)."""
        assert chunk.prefixes is not None
        for j in ending:
            r = int(active[j])
            if chunk.prefixes[r] is not None and self.keeps_turns:
                reply = tokens[r, :step].tolist()
                found = None if chunk.stops is None else chunk.stops.match(r, tokens[r, : step + 1].tolist())
                fed = [*chunk.prompts[r], *reply[: step if found is None else found.tokens - 1]]
                self.turns.keep(fed, cache, j, mask[j], None if names is None else names[j])

    def _padded(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids, mask = pad_rows(prompts, self.pad_id, max(map(len, prompts)), left=True)
        return input_ids.to(self.device), mask.to(self.device)

    def forward(
        self, input_ids: torch.Tensor, mask: torch.Tensor, cache: Cache, adapters: list[str] | None = None
    ) -> torch.Tensor:
        """`[n, V]` logits after the last of `input_ids`, extending `cache` (positions follow `mask`);
        row i through LoRA adapter `adapters[i]` when the model hosts several."""
        positions = mask_positions(mask)[:, -input_ids.shape[1] :]
        with routed(adapters):
            out = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
        return out.logits[:, -1]


@dataclass
class DecodeStats:
    """What the `static` and `compiled` loops keep and have spent: shapes compiled (or re-recorded on new
    buffers) and their seconds, the kept caches' bytes and their cap, shapes run uncompiled because the
    compiler's limit of shapes was reached."""

    decode_shapes: int = 0  # compiled (or recorded anew on new buffers)
    compile_s: float = 0.0
    cache_bytes: int = 0
    cache_cap: float | None = None
    eager_shapes: int = 0  # run uncompiled: past the compiler's limit of variants


class StaticDecoder(Decoder):
    """The `static` and `compiled` loops (see the module's docstring)."""

    def __init__(self, model: PreTrainedModel, pad_id: int, eos_ids: Collection[int], *, compiled: bool):
        super().__init__(model, pad_id, eos_ids)
        self.mode = "compiled" if compiled else "static"
        self.buffers: OrderedDict[tuple[int, int, bool], DecodeBuffers] = OrderedDict()  # least recent first
        self.stats = DecodeStats()
        self.traced: set[Variant] = set()  # the compiled step's variants the compiler has seen
        self.recorded: set[Variant] = set()  # those run on their shape's current buffers
        self.uncompiled: set[Variant] = set()  # those run eagerly: the compiler's limit was reached
        self._step: Callable[..., None] | None = None

    def release(self) -> None:
        """Before an update: `static` drops its kept buffers (their memory goes back to the allocator).
        `compiled` keeps them: a CUDA graph is recorded on its buffers, so new ones would mean a new
        recording of every shape after every update."""
        if self.mode == "static":
            self.buffers.clear()
            self.stats.cache_bytes = 0

    def decode(self, chunk: Chunk) -> tuple[torch.Tensor, torch.Tensor]:
        """As `Decoder.decode`, over a fixed-shape batch (module docstring)."""
        n, width, new = len(chunk.prompts), max(map(len, chunk.prompts)), max(chunk.max_tokens)
        rows, length = bucket(n), bucket(width + new, LEAST_LENGTH)
        names = chunk.names()
        names = None if names is None else names + [BASE_ADAPTER] * (rows - n)
        shaping = chunk.shaping()
        b = self._fill(chunk, rows, length, shaping.penalized)
        input_ids, prompt_mask = self._padded(chunk.prompts + [[self.pad_id]] * (rows - n))
        b.mask[:, :width] = prompt_mask
        b.position.copy_(mask_positions(prompt_mask)[:, -1:])
        b.width.fill_(width)
        logits = self.forward(input_ids, prompt_mask, b.cache, names)  # prefill, eager
        record(logits, b, shaping, self.eos, self.pad_id)
        step = self._stepper((rows, length, shaping), names is not None)
        for t in range(1, new):
            if t % CHECK_EVERY == 0 and self._all_ended(b, chunk, t):
                break
            with routed(names):
                step(self.model, b, shaping, self.eos, self.pad_id)
        return b.tokens[:n, :new].clone(), b.logprobs[:n, :new].clone()

    def _all_ended(self, b: DecodeBuffers, chunk: Chunk, t: int) -> bool:
        """Whether every row has ended, after ending the rows that reached a stop string (`t` tokens
        drawn): the host's check every `CHECK_EVERY` steps, the one synchronisation of the loop."""
        if chunk.stops is not None:
            going = (~b.ended[: len(chunk.prompts)]).nonzero().squeeze(-1).tolist()
            hit = stopped(chunk.stops, going, b.tokens, t)
            if hit.any():
                b.ended[torch.tensor(going, device=self.device)[hit.to(self.device)]] = True
        return bool(b.ended.all())

    def _fill(self, chunk: Chunk, rows: int, length: int, penalized: bool) -> DecodeBuffers:
        """This shape's buffers, reset for `chunk` (padding rows have limit 0: ended before they start)."""
        b = self._buffers(rows, length, penalized)
        extra = rows - len(chunk.prompts)
        b.cache.reset()
        b.mask.zero_()
        b.tokens.fill_(self.pad_id)
        b.logprobs.zero_()
        b.t.zero_()
        b.limits.copy_(torch.tensor(chunk.max_tokens + [0] * extra))
        b.ended.copy_(b.limits == 0)
        fill_draw(b.draw, chunk, self.pad_id)
        return b

    def _buffers(self, rows: int, length: int, penalized: bool) -> DecodeBuffers:
        """The kept buffers of this shape, or new ones, the least recently used shapes dropped first while
        the kept caches would pass the cap (one shape is always kept: it is being decoded)."""
        key = (rows, length, penalized)
        if key in self.buffers:
            self.buffers.move_to_end(key)
            return self.buffers[key]
        size = self._bytes(key)
        cap = self.stats.cache_cap
        while self.buffers and cap is not None and self.stats.cache_bytes + size > cap:
            dropped = self.buffers.popitem(last=False)[1]
            self.stats.cache_bytes -= self._bytes(dropped.key)
            self.recorded = {v for v in self.recorded if (*v[:2], v[2].penalized) != dropped.key}
        self.buffers[key] = new_buffers(self.model, rows, length, penalized)
        self.stats.cache_bytes += size
        return self.buffers[key]

    def _bytes(self, key: tuple[int, int, bool]) -> int:
        """A shape's kept bytes: its KV cache and its penalty state."""
        rows, length, penalized = key
        kv = kv_cache_bytes(self.model.config, rows, length, self.model.dtype)
        return kv + (penalty_bytes(self.model.config, rows) if penalized else 0)

    def _stepper(self, variant: Variant, routed_rows: bool) -> Callable[..., None]:
        """The step to run: eager under `static`, with rows routed through adapters (the routing is Python
        state a compiled step would re-trace for every mix), or past the compiler's limit of variants
        (`recompile_limit`); else the compiled step, its first call on new buffers timed as a compile."""
        if self.mode != "compiled" or routed_rows:
            return decode_step
        if variant not in self.traced and len(self.traced) >= torch._dynamo.config.recompile_limit:
            self.uncompiled.add(variant)
            self.stats.eager_shapes = len(self.uncompiled)
            return decode_step
        if self._step is None:
            self._step = compiled_step(self.device)
        self.traced.add(variant)
        if variant in self.recorded:
            return self._marked(self._step)
        self.recorded.add(variant)
        return self._timed_once(self._step)

    def _marked(self, step: Callable[..., None]) -> Callable[..., None]:
        def call(*args: object) -> None:
            torch.compiler.cudagraph_mark_step_begin()  # the last replay's outputs are consumed
            step(*args)

        return call

    def _timed_once(self, step: Callable[..., None]) -> Callable[..., None]:
        """`step`, its first call timed into `stats` (compiling or recording it), the later ones plain."""
        calls = 0

        def call(*args: object) -> None:
            nonlocal calls
            begun = time.perf_counter()
            self._marked(step)(*args)
            if calls == 0:
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                self.stats.decode_shapes += 1
                self.stats.compile_s += time.perf_counter() - begun
            calls += 1

        return call


def draw_state(model: PreTrainedModel, chunk: Chunk, shaping: Shaping, extra: int, pad: int) -> DrawState:
    """A new `DrawState` for `chunk`'s rows and `extra` padding rows (`fill_draw`)."""
    device = next(model.parameters()).device
    rows = len(chunk.prompts) + extra
    return fill_draw(DrawState.empty(rows, vocab_size(model.config), shaping.penalized, device), chunk, pad)


def fill_draw(s: DrawState, chunk: Chunk, pad: int) -> DrawState:
    """Set `s` to `chunk`'s settings, in place (its rows past the chunk's: padding rows, seed 0), with the
    counts zeroed and each row's prompt tokens seen."""
    extra = len(s.seeds) - len(chunk.prompts)
    s.seeds.copy_(torch.tensor(chunk.seeds + [0] * extra))
    s.min_tokens.copy_(torch.tensor((chunk.min_tokens or [0] * len(chunk.prompts)) + [0] * extra))
    s.divisor.fill_(chunk.temperature if chunk.temperature > 0 else 1.0)
    s.top_p.fill_(chunk.top_p)
    s.top_k.fill_(chunk.top_k)
    s.penalties.copy_(torch.tensor(chunk.penalties, dtype=torch.float32))
    if s.counts is not None and s.prompt_seen is not None:
        s.counts.zero_()
        rows = chunk.prompts + [[pad]] * extra
        ids, mask = pad_rows(rows, pad, max(map(len, rows)), left=True)
        prompt_presence(s.prompt_seen, ids.to(s.seeds.device), mask.to(s.seeds.device))
    return s


def stopped(watch: StopWatch, rows: list[int], tokens: torch.Tensor, done: int) -> torch.Tensor:
    """`[len(rows)]` bool: which of chunk rows `rows` (their responses: the first `done` columns of
    `tokens`' same rows) reached a stop string since the last check, `CHECK_EVERY` tokens ago."""
    watched = [j for j, r in enumerate(rows) if watch.watches(r)]
    hit = torch.zeros(len(rows), dtype=torch.bool)
    if watched:
        ids = tokens[[rows[j] for j in watched], :done].tolist()
        found = watch.reached([rows[j] for j in watched], ids, done - CHECK_EVERY)
        hit[watched] = torch.tensor(found, dtype=torch.bool)
    return hit


def bucket(size: int, least: int = 1) -> int:
    """The shape a size is padded to: the next power of two, at least `least`, so a team's calls (a router's
    rows, K solvers' rows, a verifier's, evaluation) fall in a few shapes instead of one per size."""
    return max(least, 1 << (size - 1).bit_length())


def compiled_step(device: torch.device) -> Callable[..., None]:
    """`decode_step` under torch.compile, one graph per variant (no dynamic shapes): on CUDA fused by
    inductor and replayed as CUDA graphs (`reduce-overhead`'s option). On CPU (tests, or a user's choice)
    inductor's C++ kernels run unvectorized and unfused (`CPU_COMPILE`): with torch 2.13 its vectorized
    argmax over the int64 noise, and an argmax fused with the log-sum-exp beside it, return wrong
    indices. A failure to compile is one line."""
    options = {"triton.cudagraphs": True} if device.type == "cuda" else CPU_COMPILE
    compiled = torch.compile(decode_step, dynamic=False, options=options)

    def call(*args: object) -> None:
        try:
            compiled(*args)
        except torch._dynamo.exc.TorchDynamoException as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BackendError(f"compiling the decode step failed ({reason}): use decode `static`") from None

    return call
