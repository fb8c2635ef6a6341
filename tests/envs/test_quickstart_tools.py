"""The quickstart with a tool (`workflows/quickstart_tools.srpo`): its graded task, its calculator, and
episodes of the embedded model through the executor, the calculator's results in the next prompt."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from srpo_dsl.envs.arith import calculate, is_heldout, make_arith_tasks
from srpo_dsl.lang import load_graph

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "workflows" / "quickstart_tools.srpo"


def test_the_graded_mix_has_three_levels_and_keeps_its_questions_held_out() -> None:
    train = make_arith_tasks(300, 0, mix="graded")
    held = make_arith_tasks(300, 0, mix="graded", heldout=True)
    assert [t["difficulty"] for t in train[:4]] == ["easy", "medium", "hard", "easy"]
    for t in train + held:
        a, op, b = re.fullmatch(r"(\d+)([+*])(\d+)", t["question"]).groups()  # type: ignore[union-attr]
        x, y = int(a), int(b)
        assert t["answer"] == str(x + y if op == "+" else x * y) and t["answers"] == [t["answer"]]
        one_digit = x < 10 and y < 10
        level = "easy" if one_digit and op == "+" else "medium" if op == "+" else "hard"
        assert t["difficulty"] == level and (one_digit or min(x, y) >= 10)
        assert is_heldout(x, y, op) == (t in held)
    assert not {t["question"] for t in train} & {t["question"] for t in held}
    assert make_arith_tasks(30, 0, mix="graded") == train[:30]


def test_the_quickstarts_sums_are_unchanged() -> None:
    """The rows the quickstart trained and was evaluated on before the graded mix existed."""
    assert make_arith_tasks(2, 0, heldout=True) == [
        {"id": "arith-eval-0-0", "question": "84+4", "answer": "88", "answers": ["88"]},
        {"id": "arith-eval-0-1", "question": "41+26", "answer": "67", "answers": ["67"]},
    ]
    assert make_arith_tasks(2, 0)[1] == {
        "id": "arith-train-0-1",
        "question": "76+91",
        "answer": "167",
        "answers": ["167"],
    }
    with pytest.raises(ValueError, match="unknown arith mix `products`"):
        make_arith_tasks(2, mix="products")
    with pytest.raises(ValueError, match="max_operand >= 10"):
        make_arith_tasks(2, max_operand=9, mix="graded")


@pytest.mark.parametrize(
    ("query", "result"),
    [
        ("47*86", "4042"),
        (" 3 + 5 ", "8"),
        ("9-12", "-3"),
        ("47*", "error: not a+b, a-b or a*b"),
        ("2**8", "error: not a+b, a-b or a*b"),
        ("__import__('os').getpid()", "error: not a+b, a-b or a*b"),
        ("1+2+3", "error: operands: integers of at most 6 digits"),
        ("True+1", "error: operands: integers of at most 6 digits"),
        ("1.5*2", "error: operands: integers of at most 6 digits"),
        ("1234567*2", "error: operands: integers of at most 6 digits"),
    ],
)
def test_the_calculator_computes_one_operation_and_explains_the_rest(query: str, result: str) -> None:
    assert calculate(query) == result


def test_the_workflow_validates_and_compiles_to_an_acting_loop() -> None:
    graph = load_graph(WORKFLOW)
    [solver] = graph.agents.values()
    assert solver.actions == ("calc", "answer") and solver.final_action == "answer"
    assert graph.task.options["mix"] == "graded" and set(graph.tools) == {"calc"}  # type: ignore[union-attr]


def test_episodes_of_the_embedded_model_read_the_calculator(tiny_model_path: Path) -> None:
    """Every calculator observation is in the prompt of the turn after it; every episode ends with an
    answer or after the forced turn; its answer is its last output's value when that answered."""
    from transformers import AutoTokenizer

    from srpo_dsl.runtime.actions import action_of
    from srpo_dsl.runtime.executor import Executor
    from srpo_dsl.runtime.setup import build_backends, build_tools, load_workflow, task_data

    wf = load_workflow(WORKFLOW)
    tasks = task_data(wf, split="eval")[:6]
    backends = build_backends(wf, "hf", {"lm": str(tiny_model_path)})
    episodes = Executor(wf.graph, backends, wf.renderer(), build_tools(wf)).run(tasks, samples=4, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    assert any(ep.tool_calls for ep in episodes) and any(not ep.tool_calls for ep in episodes)
    for ep in episodes:
        members = [m for e in ep.events for m in e.members]
        assert ep.done and 1 <= len(members) <= 4
        last = action_of(members[-1])
        assert last == "answer" or len(members) == 4
        assert ep.answer == (members[-1].parsed["value"] if last == "answer" else None)  # type: ignore[index]
        for event, after in zip(ep.events, ep.events[1:]):
            prompt = tokenizer.decode(after.members[0].prompt_token_ids, skip_special_tokens=True)
            assert len(event.observations) == (action_of(event.members[0]) == "calc")
            for o in event.observations:
                assert o["result"] == calculate(o["query"]) and f"</calc> {o['result']} " in prompt


@pytest.mark.slow
def test_a_short_training_run_of_the_workflow(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    options = ["batch=4", "group=2", "eval_size=4", "eval_every=2", "save_every=2"]
    args = ["train", str(WORKFLOW), "--out", str(tmp_path / "run"), "--steps", "2", "--device", "cpu"]
    done = subprocess.run(
        [sys.executable, "-m", "srpo_dsl", *args, *[a for o in options for a in ("--option", o)]],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1].startswith("held-out Avg@4 ")
    assert (tmp_path / "run" / "checkpoints" / "step-2").is_dir()


def test_the_stop_quickstart_cuts_each_first_turn_of_the_free_one_at_its_tag(tiny_model_path: Path) -> None:
    """`quickstart_stop.srpo` is the tool quickstart with `stop_strings = ["</calc>", "</answer>"]`: with the
    same seeds, each episode's first turn (same prompt, same draws) is the free turn's first tokens, up to
    the token that completed its first tag, and is recorded as stopped there; a free turn without a tag is
    the same turn."""
    from srpo_dsl.runtime.executor import Executor
    from srpo_dsl.runtime.setup import build_backends, build_tools, load_workflow, task_data

    runs = {}
    for name in ("quickstart_tools", "quickstart_stop"):
        wf = load_workflow(ROOT / "workflows" / f"{name}.srpo")
        backends = build_backends(wf, "hf", {"lm": str(tiny_model_path)})
        executor = Executor(wf.graph, backends, wf.renderer(), build_tools(wf))
        runs[name] = executor.run(task_data(wf, split="eval")[:6], samples=4, seed=0)
    stops = 0
    for free, cut in zip(runs["quickstart_tools"], runs["quickstart_stop"], strict=True):
        a, b = free.events[0].members[0], cut.events[0].members[0]
        ends = [(a.text.find(s) + len(s), s) for s in ("</calc>", "</answer>") if s in a.text]
        if not ends:
            assert (b.response_token_ids, b.finish) == (a.response_token_ids, a.finish)
            continue
        stops += 1
        end, tag = min(ends)
        assert (b.finish, b.stop_string, b.text) == ("stop", tag, a.text[:end])
        assert a.response_token_ids[: len(b.response_token_ids)] == b.response_token_ids
        assert b.behaviour_logprobs == a.behaviour_logprobs[: len(b.response_token_ids)]
    assert stops >= 12  # most first turns write a tag
