"""The task loader on files in the published layouts, written with pyarrow in their exact schemas:
DAPO-Math-17k (`BytedTsinghua-SIA/DAPO-Math-17k`) and Search-R1's QA parquet (`nq_hotpotqa_train`,
as Search-R1's data-processing script for it writes it)."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from srpo_dsl.envs.data import load_tasks

CHAT = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
DAPO_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", CHAT),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", pa.struct([("index", pa.string())])),
    ]
)
SEARCH_R1_COLUMNS = [
    ("data_source", pa.string()),
    ("prompt", CHAT),
    ("ability", pa.string()),
    (
        "reward_model",
        pa.struct([("ground_truth", pa.struct([("target", pa.list_(pa.string()))])), ("style", pa.string())]),
    ),
    ("extra_info", pa.struct([("index", pa.int64()), ("split", pa.string())])),
]
SEARCH_R1_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("golden_answers", pa.list_(pa.string())),
        *SEARCH_R1_COLUMNS,
    ]
)


def dapo_prompt(problem: str) -> str:
    return (
        "Solve the following math problem step by step. The last line of your response should be of the "
        "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
        f'{problem}\n\nRemember to put your answer on its own line after "Answer:".'
    )


def search_r1_prompt(question: str) -> str:
    return (
        "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
        "time you get new information. After reasoning, if you find you lack some knowledge, you can call "
        "a search engine by <search> query </search> and it will return the top searched results between "
        "<information> and </information>. You can search as many times as your want. If you find no "
        "further external knowledge needed, you can directly provide the answer inside <answer> and "
        "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
        f"Question: {question}\n"
    )


DAPO_PROBLEMS = [
    ("a1b2-0001", "Find $x$ if $2x + 3 = 11$.", "4"),
    ("a1b2-0002", "Let $f(x)=x^2$.\n\nCompute $f(3)+f(4)$.", "25"),  # a blank line inside the problem
    ("a1b2-0003", 'Evaluate "Answer:" $\\frac{1}{2}+\\frac{1}{2}$.', "1"),
]


def dapo_rows() -> list[dict]:
    return [
        {
            "data_source": "math_dapo",
            "prompt": [{"content": dapo_prompt(problem), "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": answer, "style": "rule-lawful"},
            "extra_info": {"index": index},
        }
        for index, problem, answer in DAPO_PROBLEMS
    ]


def test_dapo_math_17k_parquet(tmp_path: Path):
    path = tmp_path / "dapo-math-17k.parquet"
    pq.write_table(pa.Table.from_pylist(dapo_rows(), schema=DAPO_SCHEMA), path)
    assert pq.read_schema(path).equals(DAPO_SCHEMA)
    for kind in ("math", "parquet"):
        tasks = load_tasks(path, kind=kind)
        assert [(t["id"], t["question"], t["answer"], t["answers"]) for t in tasks] == [
            (index, problem, answer, [answer]) for index, problem, answer in DAPO_PROBLEMS
        ]
    assert tasks[0]["reward_model"] == {"ground_truth": "4", "style": "rule-lawful"}
    assert tasks[0]["prompt"][0]["role"] == "user" and tasks[0]["ability"] == "MATH"
    assert [t["id"] for t in load_tasks(path, kind="math", limit=2)] == ["a1b2-0001", "a1b2-0002"]


def test_dapo_parquet_written_by_datasets(tmp_path: Path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(dapo_rows()).to_parquet(str(tmp_path / "dapo.parquet"))
    tasks = load_tasks(tmp_path / "dapo.parquet", kind="math")
    assert [(t["id"], t["question"], t["answers"]) for t in tasks] == [
        (index, problem, [answer]) for index, problem, answer in DAPO_PROBLEMS
    ]
    (tmp_path / "broken.parquet").write_bytes(b"not a parquet file")
    with pytest.raises(ValueError, match=r"broken.parquet: cannot read Parquet \(.*\)$"):
        load_tasks(tmp_path / "broken.parquet", kind="math")


# (data_source, id, question, golden answers); NQ and HotpotQA both number their rows train_0, ...
SEARCH_R1_ROWS = [
    ("nq", "train_0", "total number of death row inmates in the us?", ["2,718"]),
    ("nq", "train_1", "big little lies season 2 how many episodes?", ["seven", "7"]),
    (
        "hotpotqa",
        "train_0",
        "Which magazine was started first Arthur's Magazine or First for Women?",
        ["Arthur's Magazine"],
    ),
    ("hotpotqa", "train_1", "what does the heading Question: mean on a quiz sheet?", ["a prompt"]),
]


def search_r1_rows(with_question: bool) -> list[dict]:
    rows = []
    for i, (source, rid, question, answers) in enumerate(SEARCH_R1_ROWS):
        row = {"id": rid, "question": question, "golden_answers": answers} if with_question else {}
        rows.append(
            row
            | {
                "data_source": source,
                "prompt": [{"content": search_r1_prompt(question), "role": "user"}],
                "ability": "fact-reasoning",
                "reward_model": {"ground_truth": {"target": answers}, "style": "rule"},
                "extra_info": {"index": i % 2, "split": "train"},
            }
        )
    return rows


def test_search_r1_qa_parquet(tmp_path: Path):
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(search_r1_rows(True), schema=SEARCH_R1_SCHEMA), path)
    tasks = load_tasks(path, kind="qa")
    assert [(t["id"], t["question"], t["answer"], t["answers"]) for t in tasks] == [
        ("train_0", SEARCH_R1_ROWS[0][2], "2,718", ["2,718"]),
        ("train_1", SEARCH_R1_ROWS[1][2], "seven", ["seven", "7"]),
        ("train_0@2", SEARCH_R1_ROWS[2][2], "Arthur's Magazine", ["Arthur's Magazine"]),
        ("train_1@3", SEARCH_R1_ROWS[3][2], "a prompt", ["a prompt"]),
    ]
    assert tasks[2]["data_source"] == "hotpotqa" and tasks[2]["extra_info"] == {"index": 0, "split": "train"}


def test_search_r1_parquet_without_question_columns(tmp_path: Path):
    """Only the verl columns: the question is the prompt without the Search-R1 instruction."""
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(search_r1_rows(False), schema=pa.schema(SEARCH_R1_COLUMNS)), path)
    for kind in ("qa", "parquet"):
        tasks = load_tasks(path, kind=kind)
        assert [(t["id"], t["question"], t["answers"]) for t in tasks] == [
            ("0", "total number of death row inmates in the us?", ["2,718"]),
            ("1", "big little lies season 2 how many episodes?", ["seven", "7"]),
            (
                "0@2",
                "Which magazine was started first Arthur's Magazine or First for Women?",
                ["Arthur's Magazine"],
            ),
            ("1@3", "what does the heading Question: mean on a quiz sheet?", ["a prompt"]),
        ]
        assert tasks[1]["answer"] == "seven"
