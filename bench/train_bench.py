"""Training throughput of `srpo-dsl train` against TRL's `GRPOTrainer`, side by side in one run (CPU).

    python bench/train_bench.py                      # workflows/single_agent.srpo, builtin:tiny, 20 steps x 3
    python bench/train_bench.py --steps 10 --repeats 1 --model PATH
    python bench/train_bench.py --smoke              # a check that both sides run: 1 step of 2 prompts x 2

Both sides train the same model (`builtin:tiny`, or --model PATH, fp32 on CPU) on the same
prompts: the workflow's `arith` train tasks rendered with the solver's template
(`S 17+25=`), in the order `srpo-dsl train` draws them (step s uses the same 16 prompts on
both sides), as the same token ids: srpo-dsl's `hf` engine applies the model's chat template when it
has one, so TRL then gets one-message conversations and renders them with that template; without
one, TRL gets BOS + the text, as srpo-dsl sends it. The bench refuses to compare (one line) when
TRL's tokenization would give other ids, and checks the ids of TRL's first generation against
srpo-dsl's after each TRL run. Settings follow the workflow's `train` block and its solver node:
batch prompts per step, group completions per prompt (batch x group completions per
optimizer step), at most `max_tokens` new tokens, temperature 1.0 with no top-k/top-p,
one optimizer step per generation batch (no reuse), the same learning rate (constant),
AdamW without weight decay, gradient clipping 1.0, no KL term. The TRL reward is the
workflow's: 1.0 when the completion's `\\boxed{...}` equals a+b, -0.1 when it has none.

What is timed, per optimizer step (setup, warm-up, evaluation and checkpoints excluded):
  srpo-dsl: the trainer's own per-step `time` (metrics.jsonl): rollout of the step's
            prompts through the executor (generation, parsing, reward), building the
            rows, the update (the forward and backward, DeepSpeed's optimizer step; with
            one epoch the update's own detached log-probs are the old ones, so no extra
            no-grad pass) and handing the new weights to rollout.
            Evaluation (step 0 and the last step; shrunk to 1 prompt x 1 sample) and the
            last step's checkpoint are outside the timer.
  TRL:      from `on_step_begin` to `on_step_end` of a `TrainerCallback`: generation
            (`model.generate`), reward, advantages, the loss forward and backward,
            clipping and the optimizer step (logging and saving are off).
Generated tokens are counted the same way on both sides: completion tokens up to and
including the end-of-sequence token. Each side lives in its own process (started before
anything initialises torch.distributed: TRL would otherwise wrap the model in DDP), runs
one untimed warm-up run (--warmup-steps), then R timed runs (--repeats), the two sides
alternating order round by round; medians are reported. Every run builds a fresh model
and optimizer, as `srpo-dsl train` does. Both sides use the same torch thread count:
all cores on a quiet machine, 1 when the load average says the cores are busy (OpenMP
threads then thrash and steps get 10-30x slower). The ratio srpo-dsl/TRL is throughput
over throughput (goal: >= 1.2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = {
    "step": 1,
    "turn": 1,
    "max_turns": 1,
    "replica": 1,
    "pool_size": 1,
    "team_context": [],
    "feedback": [],
    "documents": [],
    "memory": {"accepted": [], "feedback": [], "documents": []},
}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Setup:
    """The workflow's settings, its agent node and the prompts of every step, in training order."""

    def __init__(self, workflow: Path, steps: int, batch: int | None, group: int | None):
        from srpo_dsl.rl.distributed.data_order import step_prompts
        from srpo_dsl.runtime.setup import load_workflow, task_data

        self.workflow = workflow
        wf = load_workflow(workflow)
        self.train = wf.graph.train.model_dump()
        self.batch = batch or self.train["batch"]
        self.group = group or self.train["group"]
        nodes = wf.graph.event_nodes
        if len(nodes) != 1 or len(wf.graph.policies) != 1:
            raise SystemExit(
                f"{workflow}: this bench compares a single-agent workflow (one node, one policy)"
            )
        self.node = nodes[0]
        self.policy = next(iter(wf.graph.policies))
        self.max_tokens, self.temperature = self.node.agent.max_tokens, self.node.agent.temperature
        if self.node.agent.top_p not in (None, 1.0):
            raise SystemExit("the bench assumes top_p = 1")
        tasks = task_data(wf, split="train")
        renderer = wf.renderer()
        self.steps = []  # per step: [(prompt text, answer)] in the trainer's order
        for step in range(1, steps + 1):
            rows = [tasks[i] for i in step_prompts(len(tasks), self.batch, step, self.train["seed"])]
            ctx = {**CONTEXT, "role": self.node.agent.name}
            self.steps.append(
                [(renderer.render(self.node.agent.prompt, {**ctx, "task": t}), t["answer"]) for t in rows]
            )


# --- srpo-dsl --------------------------------------------------------------------------------


def run_srpo(
    setup: Setup, model: str, steps: int, scratch: Path, extra: dict | None = None, device: str = "cpu"
) -> dict:
    from srpo_dsl.rl.loop.plan import plan_file
    from srpo_dsl.rl.loop.trainer import train

    out = Path(tempfile.mkdtemp(dir=scratch, prefix="srpo-"))
    overrides = {
        "steps": steps,
        "batch": setup.batch,
        "group": setup.group,
        # evaluation is outside the step timer; shrink it (it still runs at step 0 and the last step)
        "eval_every": steps + 1,
        "eval_size": 1,
        "eval_k": 1,
        "save_every": steps + 1,
        **(extra or {}),
    }
    t0 = time.perf_counter()
    history = train(
        plan_file(setup.workflow, out / "run", overrides, False, models={setup.policy: model}, device=device),
        progress=False,
    )
    wall = time.perf_counter() - t0
    times = [row["time"] for row in history]
    # response_length is the mean over the step's rows; rows = events x mean set size
    tokens = [row["response_length"] * row["num_events"] * row["mean_set_size"] for row in history]
    return {
        "step_times": times,
        "tokens": tokens,
        "wall": wall,
        "return": [row["return"] for row in history],
        "update_times": [row["time/update"] for row in history],
        "rows": [row["num_events"] * row["mean_set_size"] for row in history],
        "peak_gib": max((row.get("memory/peak_gib", 0.0) for row in history), default=0.0),
        "out": out / "run",
    }


# --- TRL --------------------------------------------------------------------------------------


def trl_prompts(tokenizer, texts: list[str]) -> list:
    """Each prompt in the form TRL must get it to feed the model the ids srpo-dsl sends: with a chat template
    (which srpo-dsl's `hf` engine then uses) a one-message conversation that TRL renders with the same
    template, else BOS + the text. Refuses (one line) when TRL's tokenization would still differ."""
    templated = bool(tokenizer.chat_template)
    if templated:
        prompts: list = [[{"role": "user", "content": t}] for t in texts]
    else:
        bos = tokenizer.bos_token if tokenizer.bos_token_id is not None else ""
        prompts = [bos + t for t in texts]
    for text, prompt, ids in zip(texts, prompts, srpo_prompt_ids(tokenizer, texts)):
        for got in trl_prompt_ids(tokenizer, prompt):
            if got != ids:
                raise SystemExit(
                    f"TRL and srpo-dsl would tokenize the prompts differently ({'with' if templated else 'no'} "
                    f"chat template): {text!r} is {ids} in srpo-dsl, {got} in TRL"
                )
    return prompts


def srpo_prompt_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    """The ids srpo-dsl's `hf` engine sends: the model's chat template where it has one (the default of
    `HFBackend`'s `use_chat_template`), else BOS + the text."""
    from srpo_dsl.backends.chat import encode_prompts

    return encode_prompts(tokenizer, texts, bool(tokenizer.chat_template))


def trl_prompt_ids(tokenizer, prompt) -> list[list[int]]:
    """The ids TRL's GRPOTrainer feeds the model for `prompt`, each way a TRL release tokenizes it: a
    conversation rendered with the chat template and its generation prompt, no special tokens added; plain
    text with the tokenizer's special tokens added (TRL 1.x) and without (0.x)."""
    if isinstance(prompt, list):
        done = tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return [list(done["input_ids"])]
    return [tokenizer(prompt)["input_ids"], tokenizer(prompt, add_special_tokens=False)["input_ids"]]


def trl_dataset(setup: Setup, tokenizer, steps: int):
    """The prompts of the first `steps` steps, as TRL must get them to feed srpo-dsl's ids (`trl_prompts`)."""
    from datasets import Dataset

    rows = [(p, a) for step in setup.steps[:steps] for p, a in step]
    prompts = trl_prompts(tokenizer, [p for p, _ in rows])
    return Dataset.from_dict({"prompt": prompts, "answer": [a for _, a in rows]})


def exact_match_reward(generated: list[int]):
    """The workflow's reward for TRL; appends each generation batch's token count to `generated`."""
    from srpo_dsl.runtime.parsers import parse_boxed

    def exact_match(completions, completion_ids, answer, **_):
        generated.append(sum(len(ids) for ids in completion_ids))  # up to and including EOS
        out = []
        for completion, gold in zip(completions, answer):
            # a conversation's completion is its one assistant message
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            parsed = parse_boxed(text)
            out.append(-0.1 if not parsed.valid else float(str(parsed.value).strip() == gold))
        return out

    return exact_match


def step_timer():
    """A TrainerCallback timing `on_step_begin` -> `on_step_end` into its `times`."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

    return Timer()


def record_first_prompts(model) -> tuple[list, object]:
    """The rows of the model's first forward pass (TRL's first generation's prompts), padding dropped, as a
    forward pre-hook records them; returns (the record, the hook's handle). Generation passes no attention
    mask when no row is padded."""
    seen: list[list[list[int]]] = []

    def record(module, args, kwargs):
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if not seen and ids is not None:
            keep = (ids.new_ones(ids.shape) if mask is None else mask).bool()
            seen.append([row[k].tolist() for row, k in zip(ids, keep)])

    return seen, model.register_forward_pre_hook(record, with_kwargs=True)


def check_fed(seen: list, setup: Setup, tokenizer) -> None:
    """Refuses (one line) when TRL's first generation fed other ids than srpo-dsl sends for step 1 x group."""
    want = srpo_prompt_ids(tokenizer, [p for p, _ in setup.steps[0]]) * setup.group
    if not seen or sorted(seen[0]) != sorted(want):
        got = seen[0][0] if seen and seen[0] else None
        raise SystemExit(
            f"TRL fed the model other prompt ids than srpo-dsl sends: {got} (srpo-dsl {want[0]})"
        )


def trl_config(setup: Setup, steps: int, scratch: Path, device: str = "cpu"):
    """GRPOConfig with the workflow's settings (see the module docstring); bf16 on CUDA."""
    from dataclasses import fields

    from trl import GRPOConfig

    # transformers 5.2x renamed gradient_checkpointing (still the name in 5.17, the GPU machine's)
    names = {f.name for f in fields(GRPOConfig)}
    checkpointing = next(n for n in ("activation_checkpointing", "gradient_checkpointing") if n in names)
    return GRPOConfig(
        **{checkpointing: False},
        output_dir=str(Path(tempfile.mkdtemp(dir=scratch, prefix="trl-"))),
        per_device_train_batch_size=setup.batch * setup.group,
        num_generations=setup.group,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        max_steps=steps,
        max_completion_length=setup.max_tokens,
        temperature=setup.temperature,
        top_p=1.0,
        top_k=0,
        learning_rate=setup.train["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=setup.train["grad_clip"],
        epsilon=setup.train["clip"],
        beta=0.0,
        use_cpu=device == "cpu",
        bf16=device == "cuda",
        fp16=False,
        shuffle_dataset=False,
        seed=setup.train["seed"],
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def run_trl(
    setup: Setup, model_path: str, steps: int, scratch: Path, threads: int, device: str = "cpu"
) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=torch.bfloat16 if device == "cuda" else torch.float32
    )
    generated: list[int] = []  # tokens per generation batch (one per optimizer step)
    timer = step_timer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=exact_match_reward(generated),
        args=trl_config(setup, steps, scratch, device),
        train_dataset=trl_dataset(setup, tokenizer, steps),
        processing_class=tokenizer,
        callbacks=[timer],
    )
    for noisy in (PrinterCallback, ProgressCallback):  # the end-of-training summary print
        trainer.remove_callback(noisy)
    torch.set_num_threads(threads)  # (accelerate may touch it on init)
    seen, hook = record_first_prompts(model)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    hook.remove()
    check_fed(seen, setup, tokenizer)
    if device == "cuda":
        torch.cuda.synchronize()
    if len(timer.times) != steps or len(generated) != steps:
        raise SystemExit(
            f"TRL ran {len(timer.times)} optimizer steps and {len(generated)} generation batches, "
            f"expected {steps} of each"
        )
    return {"step_times": timer.times, "tokens": [float(n) for n in generated], "wall": wall}


# --- the table --------------------------------------------------------------------------------


def summary(runs: list[dict]) -> dict:
    secs = [sum(r["step_times"]) for r in runs]
    steps = len(runs[0]["step_times"])
    return {
        "steps": steps,
        "seconds": statistics.median(secs),
        "steps_per_s": statistics.median(steps / s for s in secs),
        "tokens_per_s": statistics.median(sum(r["tokens"]) / s for r, s in zip(runs, secs)),
        "tokens_per_step": statistics.median(sum(r["tokens"]) / steps for r in runs),
        "step_ms": statistics.median(1000 * statistics.median(r["step_times"]) for r in runs),
        "wall": statistics.median(r["wall"] for r in runs),
    }


def default_threads() -> tuple[int, str]:
    """All cores (up to 8) on a quiet machine, else one: on busy cores OpenMP threads thrash (10-30x slower steps)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load < cores - 0.5:
        return min(cores, 8), f"quiet machine, load {load:.1f} on {cores} cores"
    return 1, f"busy machine, load {load:.1f} on {cores} cores"


def worker(side: str, conn, options: dict) -> None:
    """One side in its own process (TRL must not see srpo-dsl's process group: it would wrap the model in DDP).

    Receives a step count per run, answers with that run's timings; None ends it.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    import logging

    import torch

    for name in ("deepspeed", "DeepSpeed", "transformers", "trl", "accelerate", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    torch.set_num_threads(options["threads"])
    setup = Setup(Path(options["workflow"]), options["steps"], options["batch"], options["group"])
    scratch = Path(tempfile.mkdtemp(prefix=f"train-bench-{side}-"))
    try:
        while (steps := conn.recv()) is not None:
            torch.set_num_threads(options["threads"])
            if side == "srpo":
                run = run_srpo(setup, options["model"], steps, scratch, options["srpo_set"])
            else:
                run = run_trl(setup, options["model"], steps, scratch, options["threads"])
            run.pop("out", None)
            conn.send(run)
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workflow", default=str(ROOT / "workflows/single_agent.srpo"))
    ap.add_argument(
        "--model", default="builtin:tiny", help="builtin:tiny (the shipped model) or a local model path"
    )
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps per run")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per side (medians reported)")
    ap.add_argument("--warmup-steps", type=int, default=2, help="steps of the untimed warm-up run per side")
    ap.add_argument("--batch", type=int, default=None, help="prompts per step (default: the workflow's)")
    ap.add_argument(
        "--group", type=int, default=None, help="completions per prompt (default: the workflow's)"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads on both sides (default: all cores, or 1 when the machine is busy)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra srpo-dsl training option (e.g. old_logprobs=rollout), departing from the workflow",
    )
    ap.add_argument("--only", choices=["srpo", "trl"], default=None, help="run one side only")
    ap.add_argument("--json", default=None, help="also write the raw per-step times here")
    ap.add_argument("--smoke", action="store_true", help="a check that it runs: 1 step of 2 x 2, no warm-up")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.repeats, args.warmup_steps, args.batch, args.group = 1, 1, 0, 2, 2
    return args


def srpo_options(items: list[str]) -> dict:
    """--set KEY=VALUE items as training options (JSON values, else strings)."""
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def run_rounds(args: argparse.Namespace, options: dict, sides: list[str]) -> tuple[dict, list[float]]:
    """Both workers: a warm-up run each, then `repeats` timed rounds in alternating order."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    conns, procs = {}, {}
    for side in sides:
        parent, child = ctx.Pipe()
        procs[side] = ctx.Process(target=worker, args=(side, child, options), daemon=True)
        procs[side].start()
        child.close()  # the worker's end lives in the worker only: its death reads as EOF here
        conns[side] = parent

    def once(side: str, steps: int) -> dict:
        conns[side].send(steps)
        try:
            return conns[side].recv()
        except EOFError:
            procs[side].join(timeout=10)
            raise SystemExit(f"the {side} worker died (exit code {procs[side].exitcode})") from None

    runs: dict[str, list[dict]] = {s: [] for s in sides}
    load = [os.getloadavg()[0]]
    try:
        for side in sides if args.warmup_steps else []:  # warm-up, untimed
            once(side, args.warmup_steps)
            print(f"warmed up {side}", file=sys.stderr, flush=True)
        for rep in range(args.repeats):
            for side in sides if rep % 2 == 0 else sides[::-1]:
                run = once(side, args.steps)
                runs[side].append(run)
                load.append(os.getloadavg()[0])
                print(
                    f"round {rep + 1}/{args.repeats} {side}: {sum(run['step_times']):.2f}s for {args.steps} steps",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for side in sides:
            with contextlib.suppress(OSError):
                conns[side].send(None)
            procs[side].join(timeout=30)
    return runs, load


def print_report(args: argparse.Namespace, setup: Setup, stats: dict, machine: str, srpo_set: dict) -> None:
    import trl

    print(machine)
    print(
        f"workflow {Path(args.workflow).name}, model {args.model}: {setup.batch} prompts x {setup.group} completions "
        f"per optimizer step, max {setup.max_tokens} new tokens, temperature {setup.temperature}, lr "
        f"{setup.train['lr']}; {args.steps} timed steps per run, median of {args.repeats} run(s) per side after "
        + (f"a {args.warmup_steps}-step warm-up" if args.warmup_steps else "no warm-up")
        + "; each side in its own process"
        + (f"; srpo-dsl options set: {srpo_set}" if srpo_set else "")
    )
    print()
    print(
        "| system | steps | seconds | optimizer steps/s | generated tokens/s | tokens/step | ratio srpo-dsl/TRL |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    names = {"srpo": "srpo-dsl train", "trl": f"TRL GRPOTrainer {trl.__version__}"}
    for side, st in stats.items():
        ratio = ""
        if side == "srpo" and "trl" in stats:
            t = stats["trl"]
            ratio = (
                f"{st['steps_per_s'] / t['steps_per_s']:.2f} (steps/s), "
                f"{st['tokens_per_s'] / t['tokens_per_s']:.2f} (tokens/s)"
            )
        print(
            f"| {names[side]} | {st['steps']} | {st['seconds']:.2f} | {st['steps_per_s']:.2f} | "
            f"{st['tokens_per_s']:.0f} | {st['tokens_per_step']:.0f} | {ratio} |"
        )
    print()
    print(
        "seconds: sum of the per-step times (rollout + update) of one run, median over runs; median step: "
        + ", ".join(f"{names[s]} {st['step_ms']:.0f} ms" for s, st in stats.items())
        + "; wall-clock of a whole run incl. model load, engine setup, eval and checkpoint: "
        + ", ".join(f"{names[s]} {st['wall']:.1f}s" for s, st in stats.items())
    )


def main() -> None:
    args = parse_args()

    import torch
    import transformers
    import trl

    from srpo_dsl.models.specs import resolve_model_spec

    if args.threads:
        threads, why = args.threads, "--threads"
    else:
        threads, why = default_threads()
    model = resolve_model_spec(args.model)  # a local folder both workers load
    setup = Setup(Path(args.workflow), max(args.steps, args.warmup_steps), args.batch, args.group)
    srpo_set = srpo_options(args.set)
    options = {
        "srpo_set": srpo_set,
        "workflow": args.workflow,
        "model": model,
        "steps": max(args.steps, args.warmup_steps),
        "batch": args.batch,
        "group": args.group,
        "threads": threads,
    }
    sides = [s for s in ("srpo", "trl") if args.only in (None, s)]
    runs, load = run_rounds(args, options, sides)
    stats = {s: summary(r) for s, r in runs.items()}
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "threads": threads, "runs": runs, "load": load}, indent=1)
        )
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = (
        f"machine: {cpu_name()}, {ncpu} cores visible, {threads} torch thread(s) per side ({why}), load average "
        f"(1 min) {min(load):.1f}-{max(load):.1f} during the run; python {platform.python_version()}, torch "
        f"{torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; device cpu (fp32)"
    )
    print_report(args, setup, stats, machine, srpo_set)


if __name__ == "__main__":
    main()
