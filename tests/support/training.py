"""What the training tests share: a two-policy team, a one-policy team of one step (`ONE_POLICY_TEAM`), two
tiny random models and the chat template of tests/conftest.py's, synthetic episodes, engines built on them,
and the environment of a subprocess that trains (`train_env`)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TEAM = """\
workflow team
policy a = hf("model-a") with (temperature = 1.0)
policy b = hf("model-b") with (temperature = 0.7)
task arith(n = 64, seed = 0, max_operand = 20, eval_n = 8)
agent solver[2]  uses a prompt "solver.j2"     emits text with (max_tokens = 6)
agent aggregator uses b prompt "aggregator.j2" emits text with (max_tokens = 6)
parallel solver      # one event, K = 2
aggregate aggregator # singleton event
reward f1(aggregator, task.answer) invalid -0.1
train with (objective = srpo, group = 4, batch = 4, lr = 1e-2, steps = 4, epochs = 2, eval_size = 4, eval_k = 2,
            eval_every = 2, save_every = 2)
"""
TEAMS = {  # the team above with full models, and with two adapters on one frozen base
    "full": TEAM,
    "adapters": TEAM.replace(
        'policy a = hf("model-a") with (temperature = 1.0)\npolicy b = hf("model-b") with (temperature = 0.7)',
        'policy base = hf("model-a") frozen\npolicy a = adapter(base, r = 4, alpha = 8) with (temperature = 1.0)\n'
        "policy b = adapter(base, r = 2, alpha = 4) with (temperature = 0.7)",
    ).replace("lr = 1e-2", "lr = 1e-1"),  # LoRA starts as the identity: a larger step, so events clip
}
ONE_POLICY_TEAM = """\
workflow team
policy lm = hf("model") with (temperature = 1.0)
task arith(n = 16, seed = 0, max_operand = 9, eval_n = 4)
agent solver[2]  uses lm prompt "solver.j2" emits text with (max_tokens = 4)
agent aggregator uses lm prompt "aggregator.j2" emits text with (max_tokens = 4)
parallel solver
aggregate aggregator
reward exact_match(aggregator, task.answer) invalid -0.1
train with (group = 2, batch = 2, steps = 1, eval_size = 2, eval_k = 2, save_every = 5)
"""  # one step of `srpo-dsl train` on a model folder `model`, prompts solver.j2 and aggregator.j2
CHAT_TEMPLATE = (  # tests/conftest.py's `tiny_random_model`'s: <|user|>TEXT<|assistant|>
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SGD = {"optimizer": {"type": "SGD", "params": {"lr": 1.0}}}  # update = -grad: parameters show gradient errors


# --- shared helpers (also used by the subprocess workers) -----------------------------------


def policy_spec(trainable: bool, lora: dict | None = None):
    """A checked `policy` declaration (what build_policy reads from the compiled graph)."""
    from srpo_dsl.lang.checks.declarations import PolicyInfo

    return PolicyInfo("p", "hf", "unused", trainable, lora, {})


def make_models(folder: Path) -> tuple[Path, Path]:
    """Two different random 1-layer Llamas (hidden 32) sharing a small byte-level BPE tokenizer."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=280,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["S 17+25=42", "A 3+4=7 the answer"] * 10, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", padding_side="left"
    )
    paths = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
        path = folder / f"model-{seed}"
        LlamaForCausalLM(config).save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths.append(path)
    return paths[0], paths[1]


def make_episodes(mixed: bool, n_prompts: int = 3, group: int = 4, seed: int = 0) -> list:
    """Synthetic rollouts: per episode a K=2 event (members from policies a and b when `mixed`) and a K=1 event."""
    from srpo_dsl.runtime.episode import Episode, Event, Member

    rng = random.Random(seed)

    def member(i: int, policy: str, role: str) -> Member:
        n = rng.randint(1, 6)
        return Member(
            i,
            role,
            i + 1,
            policy,
            0,
            [1] + [rng.randrange(3, 200) for _ in range(rng.randint(2, 5))],
            [rng.randrange(3, 200) for _ in range(n)],
            [-rng.uniform(3.0, 7.0) for _ in range(n)],
            "",
            True,
            None,
        )

    episodes = []
    for p in range(n_prompts):
        for s in range(group):
            ep = Episode(
                f"q{p}/{s}", f"q{p}", s, {"id": f"q{p}"}, team_return=rng.choice([0.0, 1.0, 0.5, -0.1])
            )
            solvers = [member(0, "a", "solver"), member(1, "b" if mixed else "a", "solver")]
            ep.events = [
                Event(f"q{p}/{s}/e1", "parallel:solver", "n1", "x", 2, True, solvers),
                Event(
                    f"q{p}/{s}/e2", "aggregate:aggregator", "n2", "y", 1, True, [member(0, "a", "aggregator")]
                ),
            ]
            episodes.append(ep)
    return episodes


TEMPERATURES = {"a": {"solver": 1.0, "aggregator": 1.0}, "b": {"solver": 1.0}}  # policy -> role


def conversation_episodes(n_prompts: int = 2, group: int = 3, seed: int = 0) -> list:
    """Synthetic multi-turn rollouts, each turn continuing its member's token stream (prompt = the previous
    turn's prompt + response + new observation ids): per episode two rounds of a K=2 `solver` event
    (replica 1 on policy a, replica 2 on b, each continuing its own replica's conversation) and three
    turns of a `talker` (policy a), each its own K=1 event; rows in order: solvers, talker 1, talker 2,
    solvers, talker 3."""
    from srpo_dsl.runtime.episode import Episode, Event, Member

    rng = random.Random(seed)
    ids = lambda lo, hi: [rng.randrange(3, 200) for _ in range(rng.randint(lo, hi))]  # noqa: E731

    def turn(i: int, role: str, replica: int, policy: str, stream: dict) -> Member:
        prompt, response = stream.get((role, replica), [1]) + ids(1, 3), ids(1, 5)
        stream[(role, replica)] = prompt + response
        logprobs = [-rng.uniform(3.0, 7.0) for _ in response]
        return Member(i, role, replica, policy, 0, prompt, response, logprobs, "", True, None)

    solvers, talker = [("solver", 1, "a"), ("solver", 2, "b")], [("talker", 1, "a")]
    steps = [("solve", solvers), ("talk", talker), ("talk", talker), ("solve", solvers), ("talk", talker)]
    episodes = []
    for p in range(n_prompts):
        for s in range(group):
            ep = Episode(
                f"q{p}/{s}", f"q{p}", s, {"id": f"q{p}"}, team_return=rng.choice([0.0, 1.0, 0.5, -0.1])
            )
            stream: dict = {}  # (role, replica) -> its conversation's ids so far
            for k, (kind, seats) in enumerate(steps):
                members = [turn(i, *seat, stream) for i, seat in enumerate(seats)]
                ep.events.append(
                    Event(f"{ep.episode_id}/e{k}", f"{kind}:x", kind, f"s{k}", len(members), True, members)
                )
            episodes.append(ep)
    return episodes


CONVERSATION_TEMPERATURES = {"a": {"solver": 1.0, "talker": 0.7}, "b": {"solver": 1.0}}  # policy -> role


def build(paths: dict, dist, **options) -> dict:
    """One engine per policy, with SGD (lr 1) unless `ds` says otherwise."""
    from srpo_dsl.lang.checks.schema import TrainOptions
    from srpo_dsl.rl.engines.ds_engine import ds_config
    from srpo_dsl.rl.engines.policies import build_policy

    ds = options.pop("ds", SGD)
    opts = TrainOptions(**{"grad_clip": 1e9, **options})
    config = ds_config(opts, device="cpu", world_size=dist.world_size, user=ds)
    spec = policy_spec(trainable=True)
    return {
        name: build_policy(name, str(path), spec, opts, dist, config) for name, path in paths.items()
    }, opts


def parameters(policies: dict) -> dict:
    """Full parameters of every policy (gathered under ZeRO-3), as copies."""
    from srpo_dsl.rl.engines.weight_sync import full_state

    out = {}
    for name, p in policies.items():
        with full_state(p.module) as state:
            out.update({f"{name}.{k}": v.detach().clone() for k, v in state.items()})
    return out


def assert_close(x: dict, y: dict, atol: float = 1e-5) -> None:
    assert x.keys() == y.keys()
    worst = max((x[k] - y[k]).abs().max().item() for k in x)
    assert worst <= atol, f"parameters differ by {worst:.3g}"


def assert_same_update(a: tuple, b: tuple) -> None:
    """Two updates' (parameters, stats, ...) agree: weights to 1e-5, loss to 1e-6, grad norm to 1e-5 relative."""
    assert_close(a[0], b[0])
    assert a[1]["loss"] == pytest.approx(b[1]["loss"], abs=1e-6)
    assert a[1]["grad_norm"] == pytest.approx(b[1]["grad_norm"], rel=1e-5)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run far faster on one thread (and two threads thrash when the other core is busy)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_team(folder: Path, team: str = TEAM) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "solver.j2").write_text("S {{ task.question }}=")
    (folder / "aggregator.j2").write_text(
        "{% for m in team_context %}{{ m.text }} {% endfor %}A {{ task.question }}="
    )
    (folder / "team.srpo").write_text(team)
    return folder / "team.srpo"


def varied_reward() -> None:
    """Random models never answer right: reward the parity of the answer's length instead."""
    from srpo_dsl.envs.rewards import REWARDS

    REWARDS["f1"] = lambda pred, task, field: float(len(pred or "") % 2)


def train_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def chained_rows(seed: int = 0) -> tuple[list[list[int]], list[list[int]], list[int], list[str]]:
    """Prompts, responses, follows and adapters of two conversations (3 turns on adapter x, 2 on y; a turn's
    prompt is the previous turn's prompt + response + observation ids) and a row alone (the base), shuffled:
    a chain's rows out of order."""
    rng = random.Random(seed)
    ids = lambda lo, hi: [rng.randrange(3, 200) for _ in range(rng.randint(lo, hi))]  # noqa: E731
    prompts, responses, follows, adapters = [], [], [], []
    for turns, adapter in ((3, "x"), (2, "y"), (1, "__base__")):
        stream = [1]
        for k in range(turns):
            prompts.append(stream + ids(1, 3))
            responses.append(ids(1, 5))
            follows.append(len(prompts) - 2 if k else -1)
            adapters.append(adapter)
            stream = prompts[-1] + responses[-1]
    order = [4, 2, 5, 0, 3, 1]
    position = {row: k for k, row in enumerate(order)}
    follows = [position[follows[i]] if follows[i] >= 0 else -1 for i in order]
    return [prompts[i] for i in order], [responses[i] for i in order], follows, [adapters[i] for i in order]
