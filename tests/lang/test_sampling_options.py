"""The sampling controls as the language takes them: `stop_strings`, `top_k`, the three penalties and
`min_tokens` on a policy (its agents' defaults) and on an agent (which wins); their ranges, checked at the
value; list values and `fmt`; and every request the executor sends carrying them."""

from pathlib import Path

import pytest

from srpo_dsl.backends.base import GenRequest, GenResult
from srpo_dsl.backends.scripted import ScriptedBackend
from srpo_dsl.lang import analyze
from srpo_dsl.lang.checks.declarations import SAMPLING_CONTROLS
from srpo_dsl.lang.tooling.format import format_source
from srpo_dsl.runtime.executor import Executor
from srpo_dsl.runtime.setup import build_tools, load_workflow, task_data

USER = """def load(split):
    return [{"id": "q", "question": "3+4", "answer": "7"}]
"""

WORKFLOW = """workflow sampling

policy lm = hf("m") frozen with (top_k = 20, repetition_penalty = 1.2, stop_strings = "</a>")
task "user.py:load"()

agent plain  uses lm prompt "p.j2" emits text
agent tuned  uses lm prompt "p.j2" emits text with ({options})

act plain
act tuned
reward exact_match(tuned, task.answer)
"""


def _analyze(tmp_path: Path, options: str):
    (tmp_path / "user.py").write_text(USER)
    (tmp_path / "p.j2").write_text("{{ task.question }}\n")
    text = WORKFLOW.replace("{options}", options)
    (tmp_path / "w.srpo").write_text(text)
    return analyze(text, str(tmp_path / "w.srpo"), [tmp_path]), text


def test_an_agent_inherits_its_policys_controls_and_its_own_win(tmp_path: Path):
    result, _ = _analyze(
        tmp_path,
        'stop_strings = ["</b>", "</c>"], top_k = 0, frequency_penalty = 0.5, presence_penalty = -0.25, '
        "min_tokens = 3",
    )
    assert [d.code for d in result.diagnostics] == ["W002"]  # a frozen policy: nothing to train
    agents = result.graph.graph["agents"]
    assert agents["plain"]["sampling"] == {
        "stop_strings": ["</a>"],  # the policy's three, the others' defaults
        "top_k": 20,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "repetition_penalty": 1.2,
        "min_tokens": 0,
    }
    assert list(agents["plain"]["sampling"]) == list(SAMPLING_CONTROLS)
    assert agents["tuned"]["sampling"] == {
        "stop_strings": ["</b>", "</c>"],
        "top_k": 0,  # its own 0 (off) wins over the policy's 20
        "frequency_penalty": 0.5,
        "presence_penalty": -0.25,
        "repetition_penalty": 1.2,
        "min_tokens": 3,
    }


BAD = [
    ("top_k = -1", "`top_k` must be greater than or equal to 0"),
    ("frequency_penalty = 2.5", "`frequency_penalty` must be less than or equal to 2"),
    ("presence_penalty = -3", "`presence_penalty` must be greater than or equal to -2"),
    ("repetition_penalty = 0", "`repetition_penalty` must be greater than 0"),
    ("min_tokens = -1", "`min_tokens` must be greater than or equal to 0"),
    ('stop_strings = ""', "`stop_strings` a stop string is not empty"),
    ("stop_strings = []", "`stop_strings` Tuple should have at least 1 item after validation, not 0"),
    ("stop_strings = [1]", "`stop_strings` must be a valid string"),
    ("top_k = [1]", "`top_k` must be a valid integer"),
]


@pytest.mark.parametrize(("option", "message"), BAD, ids=[b[0] for b in BAD])
def test_a_control_out_of_range_is_e024_at_its_value(tmp_path: Path, option, message):
    result, _ = _analyze(tmp_path, option)
    found = [(d.code, d.span.line, d.message) for d in result.diagnostics if d.severity == "error"]
    assert {f[:2] for f in found} == {("E024", 7)}, found
    assert any(message in f[2] for f in found), found


def test_seventeen_stop_strings_are_too_many(tmp_path: Path):
    many = ", ".join(f'"</t{i}>"' for i in range(17))
    result, _ = _analyze(tmp_path, f"stop_strings = [{many}]")
    (error,) = [d for d in result.diagnostics if d.severity == "error"]
    assert error.code == "E024" and "at most 16 items" in error.message


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ('stop_strings=["</a>","</b>"]', 'stop_strings = ["</a>", "</b>"]'),
        ('stop_strings = [ "</a>" ]', 'stop_strings = ["</a>"]'),
        ("stop_strings = []", "stop_strings = []"),
    ],
)
def test_fmt_writes_a_list_value_in_one_layout(written, canonical):
    text = f'workflow w\npolicy lm = hf("m") with ({written})\n'
    assert format_source(text) == f'workflow w\npolicy lm = hf("m") with ({canonical})\n'


class Recording:
    """A scripted backend that keeps every request it serves."""

    name = "recording"

    def __init__(self, script: dict):
        self.inner, self.requests = ScriptedBackend(script), []
        self.version = 0

    def generate(self, requests: list[GenRequest], *, seed: int | None = None) -> list[GenResult]:
        self.requests += requests
        return self.inner.generate(requests, seed=seed)


def test_every_request_carries_its_agents_controls(tmp_path: Path):
    _analyze(tmp_path, 'min_tokens = 40, max_tokens = 64, budget = 70, retries = 1, stop_strings = "</b>"')
    (tmp_path / "w.srpo").write_text(
        (tmp_path / "w.srpo").read_text().replace("emits text with", "emits tag(b) with")
    )
    wf = load_workflow(tmp_path / "w.srpo")
    backend = Recording(
        {"plain": ["x"], "tuned": ["no tag here, long enough to spend some budget " * 2, "<b>7</b>"]}
    )
    Executor(wf.graph, {"lm": backend}, wf.renderer(), build_tools(wf)).run(task_data(wf))
    plain, tuned, retry = backend.requests
    assert (plain.stop_strings, plain.top_k, plain.repetition_penalty, plain.min_tokens) == (
        ("</a>",),
        20,
        1.2,
        0,
    )
    assert (tuned.stop_strings, tuned.top_k, tuned.max_tokens, tuned.min_tokens) == (("</b>",), 20, 64, 40)
    # the retry has what the budget left (70 - 64 = 6 tokens): min_tokens never exceeds max_tokens
    assert (retry.max_tokens, retry.min_tokens, retry.stop_strings) == (6, 6, ("</b>",))
