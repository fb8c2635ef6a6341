"""The embedded default model `builtin:tiny`: a ~0.4M-parameter Llama warmed on the quickstart team
and the tool quickstart's agent.

It ships with the package (`srpo_dsl/models/tiny-v1/`, about 1.5 MB), made by
`python -m srpo_dsl.models.build_tiny`, which runs the build below on one CPU thread so a
rebuild gives the same bytes. Other seeds (`ensure_tiny_model(seed=...)`), or a package
without the folder, build on first use (about 7 minutes on one core) into
`<cache>/tiny-v1/`, where the cache is `$SRPO_DSL_CACHE` or `~/.cache/srpo-dsl`.

The model: a byte-level BPE tokenizer (digits split one by one; no chat template, prompts
are BOS + text) and a 2-layer Llama trained by a short supervised pass on synthetic
transcripts of every quickstart role and of the tool agent. The prompts are rendered from
`workflows/quickstart/*.j2` and `workflows/quickstart_tools/solver.j2` with the runtime's
`PromptRenderer` from the executor's own `Episode.context`, so they are token for token
what the executor sends.

Episodes follow the executor: each event's outputs, parsed by the runtime's parsers, join
the episode's `team_context` and `history` in order (the aggregator sees both solvers'
answers and the verdict; the tool agent sees its calls and the calculator's results).
The transcripts are deliberately imperfect, so RL has room: solvers are right 60% of
the time (else off by a small amount; sometimes malformed), the verifier approves
when both solvers are right (with noise), and the aggregator copies a candidate, often
but not always the right one. The tool agent (graded questions, `mix = "graded"`) asks the
calculator on half of its first turns whatever the difficulty, else answers directly
(right on 90% of one-digit sums, 50% of two-digit sums, 2% of products; else a near miss),
answers with the result it got (95%; one call in ten asks a slightly wrong question, so the
answer must be read from the result, not recomputed), and is sometimes malformed.
Greedy decoding of the result is much more accurate than sampling: early RL gains are
partly *sharpening* (see `warmup.json` in the model folder, which records both). Held-out
questions (`srpo_dsl.envs.arith.is_heldout`) are never seen in the warm-up; the report is
measured on them.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from srpo_dsl.backends.base import Backend, GenRequest
from srpo_dsl.backends.hf import HFBackend, encode_prompts
from srpo_dsl.backends.logprobs import TokenBatch, pack_sequences, token_logprobs
from srpo_dsl.envs.arith import calculate, make_arith_tasks
from srpo_dsl.runtime.actions import action_of, allowed
from srpo_dsl.runtime.episode import Episode, Member, context_entry
from srpo_dsl.runtime.hooks import ToolResult
from srpo_dsl.runtime.parsers import Parsed, parse_act, parse_boxed, parse_final_boxed, parse_verdict
from srpo_dsl.runtime.prompts import PromptRenderer

TINY_MODEL_ID = "builtin:tiny"
TINY_NAME = "tiny-v1"
SHIPPED = Path(__file__).with_name(TINY_NAME)  # package data, made by `python -m srpo_dsl.models.build_tiny`
MARKER = "warmup.json"  # written last: its presence means the folder is complete

SOLVERS = 2
POOL_SIZE = {"solver": SOLVERS, "verifier": 1, "aggregator": 1}  # as in workflows/quickstart.srpo
MAX_TOKENS = {"solver": 12, "verifier": 8, "aggregator": 16}  # as in workflows/quickstart.srpo
TEMPLATES = {role: f"quickstart/{role}.j2" for role in MAX_TOKENS}
VERDICTS = ("approve", "reject")

# Transcript statistics and warm-up schedule (tuned for 20-60% sampled team accuracy).
P_CORRECT = 0.6  # a solver's answer is right
P_MALFORMED = 0.08  # an output breaks its contract
P_VERIFIER_NOISE = 0.1  # the verdict is flipped
P_PICK_RIGHT = 0.7  # the aggregator copies the right candidate when there is one
OFFSETS = (-10, -2, -1, 1, 2, 10)

# The tool agent of workflows/quickstart_tools.srpo: `act(calc, answer)`, 3 turns, then a forced answer.
TOOL = "calc"
TOOL_ACTIONS = (TOOL, "answer")
TOOL_TURNS = 3
TOOL_MAX_TOKENS = 16
TOOL_TEMPLATE = "quickstart_tools/solver.j2"
P_CALL = 0.5  # a first turn (or one after a malformed output) asks the calculator, at any difficulty
P_MISCOPY = 0.1  # the query is the question with one operand off: the answer must come from the result
P_DIRECT = {"easy": 0.9, "medium": 0.5, "hard": 0.02}  # a direct answer is right
P_COPY = 0.95  # after a result, the answer copies it (else a near miss of it)
P_RECALL = 0.05  # after a result, the agent asks again
HARD_OFFSETS = (-100, -10, -1, 1, 10, 100)  # a near miss of a product


@dataclass(frozen=True)
class Recipe:
    """The model's shape, the warm-up schedule and the size of the held-out report."""

    hidden: int = 128
    layers: int = 2
    intermediate: int = 256
    episodes: int = 16_000  # synthetic team episodes (4 transcripts each)
    tool_episodes: int = 24_000  # synthetic tool-agent episodes (1-4 transcripts each)
    steps: int = 1_200
    batch: int = 128
    lr: float = 2e-3
    eval_questions: int = 256


RECIPE = Recipe()  # the shipped model's


@dataclass(frozen=True)
class WarmupReport:
    """What the warm-up did and how good the result is on held-out questions."""

    seed: int
    parameters: int
    steps: int
    batch: int
    final_loss: float
    sampled_team_accuracy: float  # temperature 1
    greedy_team_accuracy: float
    sampled_solver_accuracy: float
    greedy_solver_accuracy: float
    sampled_verifier_accuracy: float  # approve iff both solvers are right
    greedy_verifier_accuracy: float
    sampled_tool_accuracy: float  # the tool agent's final answer is right (graded held-out questions)
    greedy_tool_accuracy: float
    sampled_tool_call_rate: float  # the tool agent's first turn asks the calculator
    greedy_tool_call_rate: float


def cache_root() -> Path:
    return Path(os.environ.get("SRPO_DSL_CACHE") or Path.home() / ".cache" / "srpo-dsl")


def ensure_tiny_model(cache_dir: Path | None = None, *, progress: bool = True, seed: int = 0) -> Path:
    """The finished tiny model's folder: the shipped one (seed 0), else the cache's, built if needed."""
    if seed == 0 and (SHIPPED / MARKER).exists():
        return SHIPPED
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    target = root / (TINY_NAME if seed == 0 else f"{TINY_NAME}-seed{seed}")
    if (target / MARKER).exists():
        return target
    report = build_tiny_model(target, seed=seed, progress=progress)
    if progress:
        print(
            f"built {TINY_MODEL_ID}: held-out team accuracy {report.sampled_team_accuracy:.0%} sampled, "
            f"{report.greedy_team_accuracy:.0%} greedy -> {target}"
        )
    return target


def build_tiny_model(
    target: Path, *, seed: int = 0, progress: bool = True, replace: bool = False, recipe: Recipe = RECIPE
) -> WarmupReport:
    """Build into `target` atomically: a temporary sibling folder, renamed (over an old one if `replace`).

    Deterministic: one CPU thread and fixed seeds, so the same code and library versions on
    the same kind of CPU give the same bytes.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        report = _build(tmp, recipe, seed=seed, progress=progress)
        (tmp / MARKER).write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
        for path in [tmp, *tmp.iterdir()]:  # readable by all, like any installed package file
            path.chmod(0o755 if path.is_dir() else 0o644)
        if replace:
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / MARKER).exists():  # not a concurrent build that finished first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def warmup_report(path: Path) -> WarmupReport:
    """The report a finished tiny model folder was built with."""
    return WarmupReport(**json.loads((Path(path) / MARKER).read_text(encoding="utf-8")))


# --- transcripts -------------------------------------------------------------------------


def _templates_dir() -> Path:
    """The quickstart templates: package data when installed, else the repository's `workflows/`."""
    packaged = Path(str(resources.files("srpo_dsl").joinpath("_data/workflows")))
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "workflows"


def _prompt(renderer: PromptRenderer, ep: Episode, role: str, replica: int) -> str:
    """`role`'s prompt at `ep`'s state, rendered from the executor's own context (`Episode.context`)."""
    ctx = ep.context(role=role, replica=replica, pool_size=POOL_SIZE[role], turn=1, max_turns=1)
    return renderer.render(TEMPLATES[role], ctx)


def _commit(ep: Episode, role: str, texts: list[str], parse: Callable[[str], Parsed]) -> None:
    """One event of `role` (replicas 1..K in order), as the executor commits it: the event counter
    moves on, every output joins the team context, a verifier's texts the feedback."""
    ep.step += 1
    for replica, text in enumerate(texts, start=1):
        parsed = parse(text)
        ep.team_context.append(context_entry(role, replica, text, parsed.valid, parsed.value))
    if role == "verifier":
        ep.feedback += texts


def _start(task: dict) -> Episode:
    return Episode(episode_id=f"{task['id']}/0", prompt_id=str(task["id"]), sample=0, task=task)


def _verdict(text: str) -> Parsed:
    return parse_verdict(text, VERDICTS)


def _near_miss(rng: random.Random, total: int, offsets: tuple[int, ...] = OFFSETS) -> str:
    return str(abs(total + rng.choice(offsets)))


def _maybe_malformed(rng: random.Random, good: str) -> str:
    """Mostly `good`; sometimes a contract-breaking variant: unclosed, unwrapped or empty."""
    if rng.random() >= P_MALFORMED:
        return good
    return rng.choice([good[:-1], re.sub(r"\\boxed\{(.*)\}", r"\1", good), re.sub(r"\{.*\}", "{}", good)])


def _episode(rng: random.Random, task: dict, renderer: PromptRenderer) -> list[tuple[str, str]]:
    """(prompt, response) of the two solvers, the verifier and the aggregator of one episode."""
    total = int(task["answer"])
    ep = _start(task)
    prompts = [_prompt(renderer, ep, "solver", replica) for replica in range(1, SOLVERS + 1)]
    solved = []
    for _ in range(SOLVERS):
        value = task["answer"] if rng.random() < P_CORRECT else _near_miss(rng, total)
        solved.append(_maybe_malformed(rng, f"\\boxed{{{value}}}"))
    _commit(ep, "solver", solved, parse_boxed)
    right = [m["value"] == task["answer"] for m in ep.team_context]
    approve = all(right) != (rng.random() < P_VERIFIER_NOISE)
    verdict = f"<verify>{VERDICTS[0] if approve else VERDICTS[1]}</verify>"
    verdict = verdict if rng.random() >= P_MALFORMED else verdict[: -len("</verify>")]
    prompts.append(_prompt(renderer, ep, "verifier", 1))
    candidates = [m["value"] for m in ep.team_context if m["valid"]]
    if any(right) and rng.random() < P_PICK_RIGHT:
        final = task["answer"]
    elif candidates:
        final = rng.choice(candidates)
    else:
        final = task["answer"] if rng.random() < P_CORRECT else _near_miss(rng, total)
    _commit(ep, "verifier", [verdict], _verdict)
    prompts.append(_prompt(renderer, ep, "aggregator", 1))
    answer = _maybe_malformed(rng, f"FINAL: \\boxed{{{final}}}")
    return list(zip(prompts, [*solved, verdict, answer]))


# --- the tool agent ----------------------------------------------------------------------


@dataclass
class ToolRun:
    """One episode of workflows/quickstart_tools.srpo as the executor runs it: up to `TOOL_TURNS` turns
    (a `calc` action is answered by the calculator, whose observation joins the history; an answer
    ends the episode), then one turn that may only answer."""

    ep: Episode
    turns: int = 0  # outputs so far
    first_action: str | None = None
    answer: str | None = None  # the final action's value, when the last output took it
    done: bool = False

    @property
    def actions(self) -> tuple[str, ...]:
        return TOOL_ACTIONS if self.turns < TOOL_TURNS else TOOL_ACTIONS[-1:]

    def prompt(self, renderer: PromptRenderer) -> str:
        """The next turn's prompt, from the executor's own context (`Episode.context`)."""
        looping = self.turns < TOOL_TURNS
        turn, max_turns = (self.turns + 1, TOOL_TURNS) if looping else (1, 1)
        ctx = self.ep.context(
            role="solver", replica=1, pool_size=1, turn=turn, max_turns=max_turns, actions=self.actions
        )
        return renderer.render(TOOL_TEMPLATE, ctx)

    def commit(self, text: str) -> None:
        """The output committed as the executor commits it; a `calc` action's query answered by
        `calculate` (what the workflow's tool returns) as the tool's observation."""
        parsed = allowed(parse_act(text, TOOL_ACTIONS), self.actions)
        member = Member(0, "solver", 1, "lm", 0, [], [], [], text, parsed.valid, parsed.value)
        forced = self.turns == TOOL_TURNS
        self.ep.step += 1
        self.ep.commit_outputs([member])
        self.turns += 1
        action = action_of(member)
        self.first_action = self.first_action if self.turns > 1 else action
        if action == TOOL:
            query = str(parsed.value["value"])  # type: ignore[index]
            observation = ToolResult(query, calculate(query), None).observation(TOOL)
            self.ep.observations.append(observation)
            self.ep.observe(1, observation)
        self.answer = parsed.value["value"] if action == TOOL_ACTIONS[-1] else None  # type: ignore[index]
        self.done = action == TOOL_ACTIONS[-1] or forced

    def last_result(self) -> str | None:
        """The latest calculator result in the history, if any."""
        found = [h["result"] for h in self.ep.history if h["kind"] == "observation" and "result" in h]
        return found[-1] if found else None


def _act(rng: random.Random, task: dict, run: ToolRun) -> str:
    """The synthetic agent's next output: ask the calculator, answer directly (right by difficulty),
    or answer with the last result (mostly copied right); sometimes malformed."""
    offsets = HARD_OFFSETS if task["difficulty"] == "hard" else OFFSETS
    result = run.last_result()
    may_ask = TOOL in run.actions
    if result is not None and not (may_ask and rng.random() < P_RECALL):
        value = result if rng.random() < P_COPY else _near_miss(rng, int(result), offsets)
    elif result is None and not (may_ask and rng.random() < P_CALL):
        right = rng.random() < P_DIRECT[task["difficulty"]]
        value = task["answer"] if right else _near_miss(rng, int(task["answer"]), offsets)
    else:
        return _broken(rng, f"<{TOOL}>{_query(rng, task['question'])}</{TOOL}>")
    return _broken(rng, f"<answer>{value}</answer>")


def _query(rng: random.Random, question: str) -> str:
    """The question, or (sometimes) the question with its first operand off by one."""
    if rng.random() >= P_MISCOPY:
        return question
    first, op, second = re.fullmatch(r"(\d+)([+*])(\d+)", question).groups()  # type: ignore[union-attr]
    return f"{abs(int(first) + rng.choice((-1, 1)))}{op}{second}"


def _broken(rng: random.Random, good: str) -> str:
    """Mostly `good`; sometimes a contract-breaking variant: unclosed, untagged or empty."""
    if rng.random() >= P_MALFORMED:
        return good
    return rng.choice([good[:-1], re.sub(r"<[^>]*>", "", good), re.sub(r">[^<]*<", "><", good)])


def _tool_episode(rng: random.Random, task: dict, renderer: PromptRenderer) -> list[tuple[str, str]]:
    """(prompt, response) of every turn of one tool-agent episode."""
    run, rows = ToolRun(_start(task)), []
    while not run.done:
        prompt = run.prompt(renderer)
        text = _act(rng, task, run)
        run.commit(text)
        rows.append((prompt, text))
    return rows


# --- build -------------------------------------------------------------------------------


def _train_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE over the transcripts; digits stay single tokens, `\\boxed{` becomes one."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", padding_side="left"
    )


def _build(out: Path, recipe: Recipe, *, seed: int, progress: bool) -> WarmupReport:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same floating-point order on any machine load: same bytes
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model, tokenizer, loss = _warm_up(recipe, seed, progress)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        backend = HFBackend(out)  # reload exactly as users do (from_pretrained)
        questions = make_arith_tasks(recipe.eval_questions, seed, heldout=True)
        sampled = evaluate_team(backend, questions, temperature=1.0, seed=seed)
        greedy = evaluate_team(backend, questions, temperature=0.0, seed=seed)
        graded = make_arith_tasks(recipe.eval_questions, seed, heldout=True, mix="graded")
        sampled_tools = evaluate_tools(backend, graded, temperature=1.0, seed=seed)
        greedy_tools = evaluate_tools(backend, graded, temperature=0.0, seed=seed)
    finally:
        torch.set_num_threads(threads)
    return WarmupReport(
        seed=seed,
        parameters=sum(p.numel() for p in model.parameters()),
        steps=recipe.steps,
        batch=recipe.batch,
        final_loss=round(loss, 4),
        sampled_team_accuracy=sampled.team,
        greedy_team_accuracy=greedy.team,
        sampled_solver_accuracy=sampled.solver,
        greedy_solver_accuracy=greedy.solver,
        sampled_verifier_accuracy=sampled.verifier,
        greedy_verifier_accuracy=greedy.verifier,
        sampled_tool_accuracy=sampled_tools.accuracy,
        greedy_tool_accuracy=greedy_tools.accuracy,
        sampled_tool_call_rate=sampled_tools.call_rate,
        greedy_tool_call_rate=greedy_tools.call_rate,
    )


def _warm_up(
    recipe: Recipe, seed: int, progress: bool
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast, float]:
    """Tokenizer and model trained on response tokens of fresh synthetic episodes."""
    tokenizer, data = _transcripts(recipe, seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden,
        intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    loss = _fit(model, data, recipe, progress)
    return model.eval(), tokenizer, loss


def _transcripts(recipe: Recipe, seed: int) -> tuple[PreTrainedTokenizerFast, TokenBatch]:
    """The tokenizer trained on the episodes' text, and every (prompt, response + EOS) row packed."""
    rng = random.Random(seed)
    renderer = PromptRenderer([_templates_dir()])
    rows = [row for task in make_arith_tasks(recipe.episodes, seed) for row in _episode(rng, task, renderer)]
    tool_rng = random.Random(f"{seed}/tools")  # its own stream: the team's transcripts stay as they were
    graded = make_arith_tasks(recipe.tool_episodes, seed, mix="graded")
    rows += [row for task in graded for row in _tool_episode(tool_rng, task, renderer)]
    prompts, responses = [p for p, _ in rows], [r for _, r in rows]
    unique_prompts, unique_responses = sorted(set(prompts)), sorted(set(responses))
    tokenizer = _train_tokenizer(unique_prompts + responses)
    prompt_ids = dict(zip(unique_prompts, encode_prompts(tokenizer, unique_prompts, use_chat_template=False)))
    response_ids = dict(
        zip(unique_responses, tokenizer(unique_responses, add_special_tokens=False)["input_ids"])
    )
    data = pack_sequences(
        [prompt_ids[p] for p in prompts],
        [[*response_ids[r], tokenizer.eos_token_id] for r in responses],
        tokenizer.pad_token_id,
    )
    return tokenizer, data


def _fit(model: LlamaForCausalLM, data: TokenBatch, recipe: Recipe, progress: bool) -> float:
    """AdamW on the response tokens' mean negative log-likelihood; returns the smoothed final loss."""
    steps, batch = recipe.steps, recipe.batch
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    rows = len(data.input_ids)
    epochs = -(-steps * batch // rows)
    order = torch.cat([torch.randperm(rows) for _ in range(epochs)])[: steps * batch].view(steps, batch)
    loss_avg = 0.0
    model.train()
    bar = tqdm(range(steps), desc=f"warming up {TINY_MODEL_ID}", disable=not progress, unit="step")
    for step, idx in zip(bar, order):
        width = int(data.attention_mask[idx].sum(-1).max())
        mask = data.response_mask[idx, :width]
        lp = token_logprobs(model, data.input_ids[idx, :width], data.attention_mask[idx, :width], mask)
        loss = -lp.sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_avg = loss.item() if step == 0 else 0.98 * loss_avg + 0.02 * loss.item()
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss_avg:.3f}")
    return loss_avg


# --- evaluation --------------------------------------------------------------------------


@dataclass(frozen=True)
class TeamScore:
    """Fractions of questions: the aggregator's FINAL answer is right; a solver is right; the verdict fits."""

    team: float
    solver: float
    verifier: float


def evaluate_team(backend: Backend, tasks: list[dict], *, temperature: float, seed: int = 0) -> TeamScore:
    """Run the quickstart team on `tasks`: both solvers, then the verifier, then the aggregator."""
    renderer = PromptRenderer([_templates_dir()])
    episodes = [_start(t) for t in tasks]

    def act(role: str, replicas: int, step_seed: int, parse: Callable[[str], Parsed]) -> list[str]:
        """Every episode's event of `role`, generated in one batch and committed; the texts, in order."""
        requests = [
            GenRequest(_prompt(renderer, ep, role, r), MAX_TOKENS[role], temperature, role=role)
            for ep in episodes
            for r in range(1, replicas + 1)
        ]
        texts = [r.text for r in backend.generate(requests, seed=step_seed)]
        for i, ep in enumerate(episodes):
            _commit(ep, role, texts[i * replicas : (i + 1) * replicas], parse)
        return texts

    act("solver", SOLVERS, seed, parse_boxed)
    act("verifier", 1, seed + 1, _verdict)
    finals = act("aggregator", 1, seed + 2, parse_final_boxed)
    team_right = solver_right = verdict_right = 0
    for task, ep, final in zip(tasks, episodes, finals):
        solvers, verifier = ep.team_context[:SOLVERS], ep.team_context[SOLVERS]
        solver_right += sum(m["value"] == task["answer"] for m in solvers)
        both = all(m["value"] == task["answer"] for m in solvers)
        verdict_right += verifier["value"] == (VERDICTS[0] if both else VERDICTS[1])
        team_right += parse_final_boxed(final).value == task["answer"]
    n = len(tasks)
    return TeamScore(team_right / n, solver_right / (SOLVERS * n), verdict_right / n)


@dataclass(frozen=True)
class ToolScore:
    """Fractions of questions: the tool agent's final answer is right; its first turn asks the calculator."""

    accuracy: float
    call_rate: float


def evaluate_tools(backend: Backend, tasks: list[dict], *, temperature: float, seed: int = 0) -> ToolScore:
    """Run the tool agent on graded `tasks`: every unfinished episode's next turn in one batch per round."""
    renderer = PromptRenderer([_templates_dir()])
    runs = [ToolRun(_start(t)) for t in tasks]
    for round_ in range(TOOL_TURNS + 1):
        live = [r for r in runs if not r.done]
        requests = [GenRequest(r.prompt(renderer), TOOL_MAX_TOKENS, temperature, role="solver") for r in live]
        for run, out in zip(live, backend.generate(requests, seed=seed + round_) if live else []):
            run.commit(out.text)
    right = sum(r.answer == t["answer"] for r, t in zip(runs, tasks))
    calls = sum(r.first_action == TOOL for r in runs)
    return ToolScore(right / len(tasks), calls / len(tasks))
