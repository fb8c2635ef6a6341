"""bench/train_bench.py: TRL gets each prompt in the form that makes it feed the model the ids srpo-dsl
sends, whatever the chat template (the same template on both sides, or BOS + text without one), and the
bench refuses, in one line, to compare when the ids would differ or did. Its real TRL run is
tests/bench/test_bench_scripts.py's smoke run."""

import pytest
from tokenizers.processors import TemplateProcessing
from transformers import AutoTokenizer

from tests.support.clitools import ROOT, load_bench
from tests.support.training import CHAT_TEMPLATE

bench = load_bench("train_bench")
TEXTS = ["S 3+4=", "S 12+0="]
# the embedded tokenizer's ids: BOS 1, "S " 314, digits 18 + d, "+" 13, "=" 31
IDS = [[1, 314, 21, 13, 22, 31], [1, 314, 19, 20, 13, 18, 31]]


@pytest.fixture
def tokenizer(tiny_model_path):
    return AutoTokenizer.from_pretrained(tiny_model_path)


def test_with_the_embedded_template_trl_gets_conversations_of_the_ids_srpo_dsl_sends(tokenizer):
    prompts = bench.trl_prompts(tokenizer, TEXTS)
    assert prompts == [[{"role": "user", "content": t}] for t in TEXTS]
    assert bench.srpo_prompt_ids(tokenizer, TEXTS) == IDS
    assert [bench.trl_prompt_ids(tokenizer, p) for p in prompts] == [[ids] for ids in IDS]


def test_with_another_template_both_sides_render_it(tokenizer):
    tokenizer.chat_template = CHAT_TEMPLATE  # <|user|>TEXT<|assistant|>, no BOS
    prompts = bench.trl_prompts(tokenizer, TEXTS)
    want = [tokenizer(f"<|user|>{t}<|assistant|>", add_special_tokens=False)["input_ids"] for t in TEXTS]
    assert want[0][0] != 1 and bench.srpo_prompt_ids(tokenizer, TEXTS) == want
    assert [bench.trl_prompt_ids(tokenizer, p) for p in prompts] == [[ids] for ids in want]


def test_without_a_template_trl_gets_bos_and_the_text(tokenizer):
    tokenizer.chat_template = None
    prompts = bench.trl_prompts(tokenizer, TEXTS)
    assert prompts == ["<s>" + t for t in TEXTS]
    # TRL 1.x adds the tokenizer's special tokens, 0.x none: this tokenizer adds none, so both agree
    assert [bench.trl_prompt_ids(tokenizer, p) for p in prompts] == [[ids, ids] for ids in IDS]


def test_a_tokenizer_that_adds_its_own_bos_is_refused_in_one_line(tokenizer):
    tokenizer.chat_template = None
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]
    )
    assert tokenizer("<s>S 3+4=")["input_ids"] == [1, *IDS[0]]  # TRL 1.x would feed BOS twice
    with pytest.raises(SystemExit) as stop:
        bench.trl_prompts(tokenizer, TEXTS)
    message = str(stop.value)
    assert message.startswith("TRL and srpo-dsl would tokenize the prompts differently (no chat template)")
    assert "\n" not in message and str(IDS[0]) in message and str([1, *IDS[0]]) in message


def test_what_trl_fed_is_checked_against_srpo_dsl_for_step_one_times_the_group(tokenizer):
    setup = bench.Setup(ROOT / "workflows/single_agent.srpo", steps=1, batch=2, group=2)
    want = bench.srpo_prompt_ids(tokenizer, [p for p, _ in setup.steps[0]])
    bench.check_fed([[want[1], want[0], want[1], want[0]]], setup, tokenizer)  # any order
    for fed in ([], [[want[0], want[0], want[1], want[1][1:]]], [want]):  # nothing, a BOS lost, one each
        with pytest.raises(SystemExit, match=r"^TRL fed the model other prompt ids than srpo-dsl sends"):
            bench.check_fed(fed, setup, tokenizer)
