"""Multi-turn agents: today's prompts (every turn re-renders the history) against conversations (`observe`:
each turn appends to one token stream), at 2, 4 and 8 turns, side by side in one run.

    python bench/multiturn_bench.py               # four workflows x 2, 4, 8 turns, 2 timed updates each
    python bench/multiturn_bench.py --turns 2 4 --repeats 5 --workflows quickstart_tools
    python bench/multiturn_bench.py --smoke       # a check that it runs: the tool quickstart, 2 turns, 1 x 2

The shipped multi-turn workflows, on the embedded model: the tool quickstart, Search-R1 (its retrieval
server: a loopback one answering from the BM25 sample corpus), the supervisor team, the code
environment. Each is rolled out with scripted replies that never answer (the agents call their tools,
the coder's programs fail the tests; three of each, drawn in turn, so a group's episodes differ as
sampled ones would), so every episode takes all its turns: the outer loop's bound is
set to the number of turns. A conversation variant adds `observe` to every agent (a generic template:
the entries of `new_history`, one per line).

For each (workflow, turns, path), one step's rows (--prompts x --group episodes; the supervisor team, whose
8-turn episodes hold 33 events, at most 1 x 2):
- update tokens: what the update's forward passes read. Today: every row's prompt + response (a turn's
  prompt holds every turn before it). Conversations: each conversation's last turn once
  (`pack_rows`, the rows' `follows`).
- micro-batches: every path's update fills them to --budget tokens (the padded cost, rows x the longest,
  row by row; the new tokens, packed), whole events and conversations.
- update (s): the median of --repeats updates (forward, backward, optimizer step), from the same weights.
- agreement: a conversation's rows scored one by one (`cached`) and as one stream (`packed`) give the
  same update (scripted replies all score alike, so every advantage would be 0: the bench gives each
  event the advantage sin(its index + 1), and the updates have gradients to compare): the relative
  difference of the first update's gradient norm (the loss of one epoch does
  not depend on the log-probs' values, the gradient does), and of its loss.
- prefill tokens: what a rollout engine prefills over the episode's turns; with a prefix cache (vLLM's)
  a conversation's turn prefills only its new message.
- largest forward: the most tokens one forward pass holds (activation memory grows with it; on CUDA
  the peak GiB as well).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OBSERVE = (
    "{% for h in new_history %}{% if h.kind == 'output' %}{{ h.role }}: {{ h.text }}"
    "{% elif h.result is defined %}{{ h.result }}{% elif h.documents is defined %}"
    "{% for d in h.documents %}{{ d.title }}: {{ d.text }} {% endfor %}{% else %}{{ h.error }}{% endif %}\n"
    "{% endfor %}"
)


@dataclass(frozen=True)
class Case:
    """A shipped workflow, the folders it reads, and replies that keep its agents taking turns."""

    file: str
    folders: tuple[str, ...]
    replies: dict[str, list[str]]
    most: tuple[int, int] | None = None  # at most (prompts, group): a team whose turns are many and long


CASES = {  # three replies per role, drawn in turn: a group's episodes differ, as sampled ones would
    "quickstart_tools": Case(
        "quickstart_tools.srpo",
        ("quickstart_tools",),
        {"solver": ["<calc>2+3</calc>", "<calc>12*7</calc>", "<calc>40-1</calc>"]},
    ),
    "search_r1": Case(
        "search_r1.srpo",
        ("search_r1",),
        {"researcher": [f"<search>{q}</search>" for q in ("the capital of France", "Paris", "river Seine")]},
    ),
    "supervisor": Case(
        "supervisor.srpo",
        ("supervisor", "math_python.py"),
        {
            "supervisor": [f"<research>{q}</research>" for q in ("the capital of France", "Paris", "Lyon")],
            "*": [f"<search>{q}</search>" for q in ("France", "Seine", "Louvre")],
        },
        (1, 2),  # 8 turns: 33 events an episode, today's prompts to 11k tokens
    ),
    "code_env": Case(
        "code_env.srpo",
        ("code_env", "code_env.py"),
        {
            "coder": [f"<code>def add(a, b):\n    return a {op} b\n</code>" for op in ("-", "*", "- 1 +")],
            "tester": [f"<tests>assert add({a}, 2) == {a + 2}</tests>" for a in (1, 5, 9)],
        },
    ),
}


def variant(case: Case, folder: Path, turns: int, conversation: bool, server: str) -> Path:
    """The workflow on the embedded model, its outer loop bounded by `turns`, in `folder` (with its files);
    with `conversation`, every agent keeps a conversation."""
    source = ROOT / "workflows"
    for name in case.folders:
        target = folder / name
        if not target.exists():
            (shutil.copytree if (source / name).is_dir() else shutil.copy)(source / name, target)
    (folder / "observe.j2").write_text(OBSERVE, encoding="utf-8")
    text = (source / case.file).read_text(encoding="utf-8")
    text = re.sub(r'policy (\w+) = hf\("[^"]+"\)', r'policy \1 = builtin("tiny")', text)
    text = re.sub(r"repeat at most \d+", f"repeat at most {turns}", text, count=1)
    text = text.replace('"../data/', f'"{ROOT}/data/').replace("http://127.0.0.1:8000/retrieve", server)
    if conversation:
        text = "\n".join(_observed(line) for line in text.splitlines())
    path = folder / f"{case.file[:-5]}_{turns}_{'chat' if conversation else 'flat'}.srpo"
    path.write_text(text + "\n", encoding="utf-8")
    return path


def _observed(line: str) -> str:
    """An `agent` line with `observe = "observe.j2"` among its options."""
    if not line.startswith("agent "):
        return line
    if " with (" in line:
        return line.replace(" with (", ' with (observe = "observe.j2", ', 1)
    code, _, comment = line.partition("#")
    return f'{code.rstrip()} with (observe = "observe.j2")' + (f"  #{comment}" if comment else "")


def rollout_rows(path: Path, replies: Path, prompts: int, group: int):
    """The rows of one step of scripted episodes, and (prefill tokens, with a prefix cache)."""
    import torch

    from srpo_dsl.api import load
    from srpo_dsl.rl.objective.rows import build_rows

    episodes = load(path).run(
        limit=prompts, samples=group, backend="scripted", models=replies, progress=False
    )
    rows = build_rows(episodes.episodes, "srpo")
    rows = dataclasses.replace(rows, advantages=torch.sin(rows.event_ids.float() + 1.0))  # see the docstring
    prefill = sum(len(p) for p in rows.prompt_token_ids)
    cached = sum(len(rows.prompt_token_ids[i]) - _prefix(rows, i) for i in range(len(rows)))
    return rows, prefill, cached


def _prefix(rows, i: int) -> int:
    """Tokens of row i's prompt that the row it continues already holds (0: it continues none)."""
    j = rows.follows[i]
    return 0 if j < 0 else len(rows.prompt_token_ids[j]) + len(rows.response_token_ids[j])


def options(run, packed: bool, budget: int):
    """The bench's update options: one epoch, micro-batches filled to `budget` tokens, packed or not."""
    return run.opts.model_copy(
        update={"pack_rows": packed, "epochs": 1, "max_tokens_per_micro_batch": budget}
    )


def update_tokens(run, rows, opts) -> tuple[int, int]:
    """(tokens the update's forward passes read, padding excluded; the most tokens one forward holds,
    padding included), over the update's own micro-batches. Rows one by one (`cached`): each distinct
    prompt, then every response. Packed: each conversation's last turn (a row no other row in the
    micro-batch continues) once, in sequences as long as the longest."""
    from srpo_dsl.backends.logprobs import pack_into
    from srpo_dsl.rl.loop.update import atomic_ids, micro_plan

    costs = rows.new_tokens if opts.pack_rows else rows.lengths
    read, largest = 0, 0
    for micro in filter(None, micro_plan(atomic_ids(rows, run.objective, opts.pack_rows), costs, opts)):
        if opts.pack_rows:
            continued = {rows.follows[i] for i in micro}
            tails = [rows.lengths[i] for i in micro if i not in continued]
            read += sum(tails)
            largest = max(largest, len(pack_into(tails, max(tails))) * max(tails))
            continue
        distinct = {tuple(rows.prompt_token_ids[i]) for i in micro}
        responses = [rows.response_lengths[i] for i in micro]
        read += sum(map(len, distinct)) + sum(responses)
        largest = max(largest, len(distinct) * max(map(len, distinct)) + len(responses) * max(responses))
    return read, largest


def initial_weights(run) -> list[tuple[object, dict]]:
    """Each trained module and a copy of its weights now (every update of the bench starts from them)."""
    modules = [p.engine.module for p in run.policies.values() if p.engine is not None]
    return [(m, {k: v.detach().clone() for k, v in m.state_dict().items()}) for m in modules]


def timed_update(
    run, initial: list, rows, opts, repeats: int
) -> tuple[float, tuple[float, float], float | None]:
    """(median seconds of `repeats` updates, the first update's (loss, gradient norm), peak GiB on CUDA),
    each from the `initial` weights (restored before every update), after one warm-up."""
    import torch

    from srpo_dsl.rl.loop.update import update

    def once() -> tuple[float, tuple[float, float]]:
        for module, state in initial:
            module.load_state_dict(state)
        start = time.perf_counter()
        stats = update(run.policies, rows, opts, run.dist, run.temperatures, objective=run.objective)
        return time.perf_counter() - start, (stats["loss"], stats["grad_norm"])

    first = once()[1]
    cuda = run.dist.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(run.dist.device)
    seconds = statistics.median(once()[0] for _ in range(repeats))
    peak = torch.cuda.max_memory_allocated(run.dist.device) / 2**30 if cuda else None
    return seconds, first, peak


def measure(run, initial: list, name: str, turns: int, flat, chat, args) -> list[str]:
    """Three table rows: today's prompts; conversations scored row by row; conversations as streams."""
    (flat_rows, flat_prefill, _), (chat_rows, chat_prefill, chat_cached) = flat, chat
    out, losses = [], {}
    sides = (
        ("today", flat_rows, False),
        ("conversation, rows", chat_rows, False),
        ("conversation, stream", chat_rows, True),
    )
    for path, rows, packed in sides:
        opts = options(run, packed, args.budget)
        tokens, forward = update_tokens(run, rows, opts)
        seconds, losses[path], peak = timed_update(run, initial, rows, opts, args.repeats)
        prefill = f"{flat_prefill:,} | -" if path == "today" else f"{chat_prefill:,} | {chat_cached:,}"
        gap = relative_gap(losses[path], losses["conversation, rows"]) if packed else None
        memory = f"{forward:,}" + (f" ({peak:.2f} GiB)" if peak is not None else "")
        out.append(
            f"| {name} | {turns} | {path} | {len(rows)} | {tokens:,} | {memory} | {seconds:.3f} | {prefill} | "
            f"{'-' if gap is None else f'{gap:.1e}'} |"
        )
    return out


def relative_gap(a: tuple[float, float], b: tuple[float, float]) -> float:
    """The larger relative difference of (loss, gradient norm) between two updates."""
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def bench_case(name: str, case: Case, args, folder: Path, server: str) -> list[str]:
    """Every turn count of one workflow: its rollouts, then its updates on one prepared run."""
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.prepare import prepare_run

    replies = folder / f"{name}_replies.json"
    replies.write_text(json.dumps(case.replies), encoding="utf-8")
    out, run = [], None
    for turns in args.turns:
        flat_path, chat_path = (variant(case, folder, turns, chat, server) for chat in (False, True))
        prompts, group = (
            min(a, b) for a, b in zip((args.prompts, args.group), case.most or (args.prompts, args.group))
        )
        flat = rollout_rows(flat_path, replies, prompts, group)
        chat = rollout_rows(chat_path, replies, prompts, group)
        if run is None:
            small = {"batch": 1, "group": 2}  # the rows are the bench's own: the task need not fill a step
            run = prepare_run(plan_file(chat_path, folder / f"{name}_run", small, device=args.device))
            initial = initial_weights(run)
        out += measure(run, initial, name, turns, flat, chat, args)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--turns", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--prompts", type=int, default=2, help="prompts of the step")
    parser.add_argument("--group", type=int, default=4, help="episodes per prompt")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budget", type=int, default=16384, help="tokens per micro-batch (every path)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--smoke", action="store_true", help="a check that it runs: one workflow, 2 turns, 1 x 2"
    )
    args = parser.parse_args()
    if args.smoke:
        args.workflows, args.turns = ["quickstart_tools"], [2]
        args.prompts, args.group, args.repeats = 1, 2, 1
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT))  # tests.support.retrieval_server
    from srpo_dsl.envs.retrieval import Bm25Retriever
    from tests.support.retrieval_server import RetrievalServer

    print(f"load average {os.getloadavg()[0]:.2f}; {args.prompts} prompts x {args.group} episodes per step")
    print(
        "| workflow | turns | path | rows | update tokens | largest forward | update (s) | prefill | "
        "prefill, prefix cache | loss, grad norm: rel. diff |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    bm25 = Bm25Retriever(ROOT / "data/wiki_sample.jsonl")
    with tempfile.TemporaryDirectory() as tmp, RetrievalServer(bm25) as server:
        for name in args.workflows:
            print("\n".join(bench_case(name, CASES[name], args, Path(tmp), server.url)), flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
